/* meshreport's shared pieces: errors, files, JSON, gnuplot (apps/report/
 * util.c), and its subcommands beside the report itself (meshreport.c). */
#ifndef MT_REPORT_H
#define MT_REPORT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>

#include "core/core.h"

#define PROG "meshreport"
#define PATH_LEN 4096

/* one error line, then exit with code (bad input or runtime failure) */
void __attribute__((format(printf, 2, 3), noreturn)) mt_report_die(int code, const char *fmt, ...);
#define die_input(...) mt_report_die(MT_EXIT_BADINPUT, __VA_ARGS__)
#define die_runtime(...) mt_report_die(MT_EXIT_RUNTIME, __VA_ARGS__)

/* the whole file as a NUL-terminated string, or NULL */
char *read_text(const char *path);
/* the file parsed as JSON, or NULL (missing, unreadable or not JSON) */
cJSON *read_json(const char *path);
double num_or(const cJSON *o, const char *key, double fallback);
/* snprintf that truncates silently (labels, statuses) */
void __attribute__((format(printf, 3, 4))) fmt_into(char *dst, size_t cap, const char *fmt, ...);
void copy_str(char *dst, size_t cap, const char *src);
/* a/b (b alone when absolute) into out (PATH_LEN); too long is bad input */
void path_join(char *out, const char *a, const char *b);
int is_dir(const char *p);
/* dir/name opened for writing (its path into path, PATH_LEN), or exit 3 */
FILE *open_out(const char *dir, const char *name, char *path);
void close_out(FILE *f, const char *path);
/* runs `gnuplot SCRIPT` in dir (its output to gnuplot.log there): 0 when
 * the PNGs were drawn, else -1 with why: one line saying how to draw them */
int run_gnuplot(const char *dir, const char *script, char *why, size_t why_cap);

/* meshreport timeline RUN_DIR ...: the subcommand (timeline.c) */
int mt_report_timeline(int argc, char **argv);

#endif
