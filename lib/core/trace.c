/* The timeline of a rank as Chrome trace events (metrics.trace = true): a
 * span is (name, category, track, start, end, two integer arguments), kept
 * in memory and written once at the end as one JSON object of complete
 * ("X") events, timestamps in microseconds of mt_now() (wall time, or
 * virtual time on the virtual device: the same writer for both), pid =
 * rank, tid = track. Perfetto and chrome://tracing open it. */
#include "core/core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *name, *cat; /* static strings */
  int track, a0, a1;
  double t0, t1;
} span;

static struct {
  int on, paused, rank, sort;
  char name[128];
  span *s;
  size_t n, cap;
} g_t;

static const char *g_tracks[MT_TRACK_N] = {"compute", "pipeline", "collectives",
                                           "point-to-point", "step"};

void mt_trace_start(int rank, int sort, const char *name) {
  g_t.on = 1;
  g_t.rank = rank;
  g_t.sort = sort;
  snprintf(g_t.name, sizeof g_t.name, "%s", name);
  g_t.n = 0;
}

int mt_trace_on(void) { return g_t.on && !g_t.paused; }

int mt_trace_set(int on) {
  int was = !g_t.paused;
  g_t.paused = !on;
  return was;
}

void mt_trace_span(const char *name, const char *cat, int track, double t0, double t1, int a0,
                   int a1) {
  if (!mt_trace_on()) return;
  if (g_t.n == g_t.cap) {
    size_t cap = g_t.cap ? 2 * g_t.cap : 4096;
    span *s = realloc(g_t.s, cap * sizeof *s);
    if (!s) mt_die("trace: out of memory (%zu spans)", cap);
    g_t.s = s;
    g_t.cap = cap;
  }
  g_t.s[g_t.n++] = (span){.name = name, .cat = cat, .track = track, .a0 = a0, .a1 = a1,
                          .t0 = t0, .t1 = t1};
}

int mt_trace_write(const char *path, mt_err *e) {
  FILE *f = fopen(path, "w");
  if (!f) {
    mt_err_runtime(e, "cannot write the trace %s: %s", path, strerror(errno));
    return -1;
  }
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  fprintf(f, "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"args\": {\"name\": "
             "\"%s\"}},\n{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": %d, "
             "\"args\": {\"sort_index\": %d}}", g_t.rank, g_t.name, g_t.rank, g_t.sort);
  for (int k = 0; k < MT_TRACK_N; k++)
    fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, "
               "\"args\": {\"name\": \"%s\"}}", g_t.rank, k, g_tracks[k]);
  for (size_t i = 0; i < g_t.n; i++) {
    const span *s = &g_t.s[i];
    fprintf(f, ",\n{\"ph\": \"X\", \"name\": \"%s\", \"cat\": \"%s\", \"pid\": %d, \"tid\": %d, "
               "\"ts\": %.3f, \"dur\": %.3f, ",
            s->name, s->cat, g_t.rank, s->track, s->t0 * 1e6, (s->t1 - s->t0) * 1e6);
    if (s->track == MT_TRACK_STEP) fprintf(f, "\"args\": {\"step\": %d}}", s->a0);
    else fprintf(f, "\"args\": {\"mb\": %d, \"chunk\": %d}}", s->a0, s->a1);
  }
  fprintf(f, "\n]}\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    mt_err_runtime(e, "cannot write the trace %s: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}
