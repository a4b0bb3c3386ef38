/* Sources: the token files a spec names (files, directories, globs, lists
 * of those), opened, split into training and validation shards; blends of
 * weighted sources parsed from data.blend.
 *
 * Each file is memory-mapped by mt_dataset_open, which closes its
 * descriptor at once: a run over hundreds of shards holds hundreds of
 * mappings (address space, paged in as read) and no descriptors. */
#include "data/data_internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* s without its leading and trailing blanks, in place */
static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

/* a growing list of paths */
typedef struct {
  char **v;
  int n, cap;
} path_list;

static void push(path_list *l, const char *p) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 16;
    char **v = realloc(l->v, (size_t)l->cap * sizeof *v);
    if (!v) mt_die("out of memory listing token files");
    l->v = v;
  }
  size_t len = strlen(p) + 1;
  l->v[l->n] = mt_calloc(len, 1);
  memcpy(l->v[l->n++], p, len);
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* a directory's *.bin files, sorted by name */
static int list_dir(const char *dir, path_list *l, mt_err *e) {
  DIR *d = opendir(dir);
  if (!d) {
    mt_err_set(e, "%s: cannot list the directory: %s", dir, strerror(errno));
    return -1;
  }
  int first = l->n;
  const struct dirent *ent;
  char path[MT_CFG_STR_MAX * 2];
  while ((ent = readdir(d)) != NULL) {
    if (ent->d_name[0] == '.' || !mt_data_has_suffix(ent->d_name, ".bin")) continue;
    snprintf(path, sizeof path, "%s%s%s", dir, mt_data_has_suffix(dir, "/") ? "" : "/", ent->d_name);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) push(l, path);
  }
  closedir(d);
  if (l->n == first) {
    mt_err_set(e, "%s: the directory holds no token files (*.bin)", dir);
    return -1;
  }
  qsort(l->v + first, (size_t)(l->n - first), sizeof *l->v, by_name);
  return 0;
}

static int expand_entry(const char *entry, path_list *l, mt_err *e) {
  if (strpbrk(entry, "*?[")) {
    glob_t g;
    int rc = glob(entry, 0, NULL, &g); /* sorted by name */
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
      globfree(&g);
      mt_err_set(e, "%s: the pattern matches no file", entry);
      return -1;
    }
    if (rc != 0) {
      globfree(&g);
      mt_err_set(e, "%s: cannot expand the pattern (%s)", entry,
                 rc == GLOB_NOSPACE ? "out of memory" : "read error");
      return -1;
    }
    for (size_t i = 0; i < g.gl_pathc; i++) push(l, g.gl_pathv[i]);
    globfree(&g);
    return 0;
  }
  struct stat st;
  if (stat(entry, &st) == 0 && S_ISDIR(st.st_mode)) return list_dir(entry, l, e);
  push(l, entry); /* a file: mt_dataset_open says what is wrong with it */
  return 0;
}

void mt_source_paths_free(char **paths, int n) {
  for (int i = 0; i < n; i++) free(paths[i]);
  free(paths);
}

int mt_source_paths(const char *spec, char ***paths, int *n, mt_err *e) {
  *paths = NULL;
  *n = 0;
  size_t len = strlen(spec);
  char *copy = mt_calloc(len + 1, 1);
  memcpy(copy, spec, len);
  path_list l = {0};
  int rc = 0;
  char *save = NULL;
  if (!*trim(copy)) {
    mt_err_set(e, "data: no token files given (an empty file list)");
    rc = -1;
  }
  for (char *tok = rc ? NULL : strtok_r(copy, ",", &save); tok && rc == 0;
       tok = strtok_r(NULL, ",", &save)) {
    char *entry = trim(tok);
    if (!*entry) {
      mt_err_set(e, "%s: an empty entry in the list of token files", spec);
      rc = -1;
    } else if (expand_entry(entry, &l, e) != 0) {
      rc = mt_err_pass(e);
    }
  }
  free(copy);
  if (rc != 0) {
    mt_source_paths_free(l.v, l.n);
    return -1;
  }
  *paths = l.v;
  *n = l.n;
  return 0;
}

/* ------------------------------------------------------------------ */
/* opening a source                                                    */

/* the files of spec, opened; under auto, one format for all */
static int open_files(const char *spec, mt_data_format format, mt_dataset **files, int *n,
                      mt_err *e) {
  char **paths = NULL;
  *files = NULL;
  *n = 0;
  MT_TRY(e, mt_source_paths(spec, &paths, n, e));
  mt_dataset *ds = mt_calloc((size_t)*n, sizeof *ds);
  int rc = 0, opened = 0;
  for (; opened < *n && rc == 0; opened++)
    if (mt_dataset_open(&ds[opened], paths[opened], format, e) != 0) rc = mt_err_pass(e);
  /* data.format = auto: a format guessed from a name must agree with the
   * others (the header-told llm.c versions 1 and 2 are one format) */
  for (int i = 1; rc == 0 && i < *n; i++) {
    if (ds[i].format == ds[0].format) continue;
    const mt_dataset *guess = ds[i].guessed ? &ds[i] : &ds[0];
    const mt_dataset *other = guess == &ds[i] ? &ds[0] : &ds[i];
    mt_err_set(e, "%s: data.format = auto reads it as %s (from its name) but %s as %s: the "
                  "formats of one source's token files disagree; set data.format",
               guess->path, mt_data_format_name(guess->format), other->path,
               mt_data_format_name(other->format));
    rc = -1;
  }
  mt_source_paths_free(paths, *n);
  if (rc != 0) {
    for (int i = 0; i < opened; i++) mt_dataset_close(&ds[i]);
    free(ds);
    *n = 0;
    return -1;
  }
  *files = ds;
  return 0;
}

/* views of the files: shares the mapping, never owns it */
static mt_dataset view_of(const mt_dataset *ds) {
  mt_dataset v = *ds;
  v.owns_map = 0;
  return v;
}

/* hold out the last val_fraction of the source's tokens: whole shards from
 * the end, the shard the cut falls in split (for one file, exactly
 * mt_dataset_split's split) */
static void hold_out(mt_source *s, double val_fraction) {
  if (!(val_fraction > 0.0)) val_fraction = 0.0;
  if (val_fraction > 1.0) val_fraction = 1.0;
  size_t total = 0;
  for (int i = 0; i < s->n_files; i++) total += mt_dataset_ntokens(&s->files[i]);
  size_t left = (size_t)((double)total * val_fraction); /* validation tokens still to take */
  int cut = s->n_files - 1; /* the shard the cut falls in */
  while (cut > 0 && left >= mt_dataset_ntokens(&s->files[cut]) && left > 0) {
    left -= mt_dataset_ntokens(&s->files[cut]);
    cut--;
  }
  if (left > mt_dataset_ntokens(&s->files[cut])) left = mt_dataset_ntokens(&s->files[cut]);
  s->n_train = cut + 1;
  s->n_val = s->n_files - cut;
  s->train = mt_calloc((size_t)s->n_train, sizeof *s->train);
  s->val = mt_calloc((size_t)s->n_val, sizeof *s->val);
  for (int i = 0; i <= cut; i++) s->train[i] = view_of(&s->files[i]);
  s->train[cut].end -= left;
  s->val[0] = view_of(&s->files[cut]);
  s->val[0].begin = s->train[cut].end;
  for (int i = cut + 1; i < s->n_files; i++) s->val[i - cut] = view_of(&s->files[i]);
}

/* the source's own validation files: opened after the training files, kept
 * in files[n_train..] */
static int open_own_val(mt_source *s, const char *val_spec, mt_data_format format, mt_err *e) {
  mt_dataset *vf = NULL;
  int nv = 0;
  MT_TRY(e, open_files(val_spec, format, &vf, &nv, e));
  int nt = s->n_files;
  mt_dataset *all = mt_calloc((size_t)(nt + nv), sizeof *all);
  memcpy(all, s->files, (size_t)nt * sizeof *all);
  memcpy(all + nt, vf, (size_t)nv * sizeof *all);
  free(s->files);
  free(vf);
  s->files = all;
  s->n_files = nt + nv;
  s->n_train = nt;
  s->n_val = nv;
  s->train = mt_calloc((size_t)nt, sizeof *s->train);
  s->val = mt_calloc((size_t)nv, sizeof *s->val);
  for (int i = 0; i < nt; i++) s->train[i] = view_of(&all[i]);
  for (int i = 0; i < nv; i++) s->val[i] = view_of(&all[nt + i]);
  s->own_val = 1;
  return 0;
}

/* ------------------------------------------------------------------ */
/* the run's sources                                                   */

/* one source as written: its weight, name and spec (the entries joined) */
typedef struct {
  double weight;
  char name[MT_SOURCE_NAME_MAX];
  char spec[MT_CFG_STR_MAX];
  char val[MT_CFG_STR_MAX];
} source_text;

/* "name=rest" with name of [A-Za-z0-9_.-]: the name and rest, else 0 */
static int split_name(char *entry, char **name, char **rest) {
  char *eq = strchr(entry, '=');
  if (!eq || eq == entry) return 0;
  for (const char *c = entry; c < eq; c++)
    if (!isalnum((unsigned char)*c) && !strchr("_.-", *c)) return 0;
  *eq = '\0';
  *name = entry;
  *rest = trim(eq + 1);
  return 1;
}

static void append(char *dst, size_t cap, const char *entry) {
  size_t n = strlen(dst);
  snprintf(dst + n, cap - n, "%s%s", n ? "," : "", entry);
}

/* data.blend: "W [name=]entry, entry, W [name=]entry, ...": an item that
 * begins with a number and a blank starts a source */
static int parse_blend(const char *blend, source_text **out, int *n_out, mt_err *e) {
  size_t len = strlen(blend);
  char *copy = mt_calloc(len + 1, 1), *save = NULL;
  memcpy(copy, blend, len);
  source_text *v = NULL;
  int n = 0, rc = 0;
  for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
    char *item = trim(tok), *end = NULL;
    double w = strtod(item, &end);
    int weighted = end != item && (isspace((unsigned char)*end));
    if (end != item && *end == '\0') { /* a number alone: a weight without its files */
      mt_err_set(e, "data.blend: weight %s names no files (expected 'WEIGHT files', e.g. '0.3 "
                    "code/*.bin')", item);
      rc = -1;
      continue;
    }
    if (!weighted) {
      if (n == 0 || !*item) {
        mt_err_set(e, "data.blend: '%s' does not start with a weight (expected 'WEIGHT files, "
                      "WEIGHT files', e.g. '0.7 web/*.bin, 0.3 code/*.bin')", item);
        rc = -1;
      } else {
        append(v[n - 1].spec, sizeof v[n - 1].spec, item);
      }
      continue;
    }
    if (!(w > 0.0) || !isfinite(w)) {
      mt_err_set(e, "data.blend: weight %s of '%s' is not a positive number", item, item);
      rc = -1;
      continue;
    }
    v = realloc(v, (size_t)(n + 1) * sizeof *v);
    if (!v) mt_die("out of memory parsing data.blend");
    memset(&v[n], 0, sizeof v[n]);
    v[n].weight = w;
    char *rest = trim(end), *name = NULL, *files = NULL;
    if (split_name(rest, &name, &files)) {
      snprintf(v[n].name, sizeof v[n].name, "%s", name);
      rest = files;
    } else {
      snprintf(v[n].name, sizeof v[n].name, "%s", rest);
    }
    snprintf(v[n].spec, sizeof v[n].spec, "%s", rest);
    n++;
  }
  free(copy);
  for (int i = 0; rc == 0 && i < n; i++)
    for (int j = 0; j < i && rc == 0; j++)
      if (strcmp(v[i].name, v[j].name) == 0) {
        mt_err_set(e, "data.blend: two sources named '%s' (name them: 'WEIGHT name=files')",
                   v[i].name);
        rc = -1;
      }
  if (rc == 0 && n == 0) {
    mt_err_set(e, "data.blend: no sources");
    rc = -1;
  }
  if (rc != 0) {
    free(v);
    return -1;
  }
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += v[i].weight;
  for (int i = 0; i < n; i++) v[i].weight /= sum;
  *out = v;
  *n_out = n;
  return 0;
}

/* data.val for a blend: "name=entry, entry, name=entry": each source's own
 * validation files */
static int parse_blend_val(const char *val, source_text *v, int n, mt_err *e) {
  size_t len = strlen(val);
  char *copy = mt_calloc(len + 1, 1), *save = NULL;
  memcpy(copy, val, len);
  int rc = 0, cur = -1;
  for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
    char *item = trim(tok), *name = NULL, *files = NULL;
    if (split_name(item, &name, &files)) {
      cur = -1;
      for (int i = 0; i < n; i++)
        if (strcmp(v[i].name, name) == 0) cur = i;
      if (cur < 0) {
        mt_err_set(e, "data.val: no data.blend source is named '%s'", name);
        rc = -1;
        continue;
      }
      item = files;
    } else if (cur < 0) {
      mt_err_set(e, "data.val: with data.blend, validation files are given per source as "
                    "'name=files, name=files' ('%s' names no source)", item);
      rc = -1;
      continue;
    }
    append(v[cur].val, sizeof v[cur].val, item);
  }
  free(copy);
  return rc;
}

int mt_sources_open(mt_sources *ss, const char *train, const char *blend, const char *val,
                    mt_data_format format, double val_fraction, mt_err *e) {
  memset(ss, 0, sizeof *ss);
  source_text *text = NULL;
  int n = 0;
  if (blend && *blend) {
    MT_TRY(e, parse_blend(blend, &text, &n, e));
    if (val && *val && parse_blend_val(val, text, n, e) != 0) {
      free(text);
      return mt_err_pass(e);
    }
  } else {
    n = 1;
    text = mt_calloc(1, sizeof *text);
    text->weight = 1.0;
    snprintf(text->name, sizeof text->name, "train");
    snprintf(text->spec, sizeof text->spec, "%s", train ? train : "");
    snprintf(text->val, sizeof text->val, "%s", val ? val : "");
  }
  ss->src = mt_calloc((size_t)n, sizeof *ss->src);
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    mt_source *s = &ss->src[i];
    ss->n = i + 1;
    snprintf(s->name, sizeof s->name, "%s", text[i].name);
    s->weight = text[i].weight;
    int vocab = 0, used = 0;
    if (sscanf(text[i].spec, "synthetic:%d%n", &vocab, &used) == 1 && !text[i].spec[used]) {
      if (vocab < 1) mt_err_set(e, "%s: the vocabulary must be positive", text[i].spec);
      s->synthetic_vocab = vocab;
      rc = e->failed ? -1 : 0;
    } else if (open_files(text[i].spec, format, &s->files, &s->n_files, e) != 0) rc = mt_err_pass(e);
    else if (text[i].val[0]) rc = open_own_val(s, text[i].val, format, e) ? mt_err_pass(e) : 0;
    else hold_out(s, val_fraction);
  }
  free(text);
  if (rc != 0) mt_sources_close(ss);
  return rc;
}

void mt_sources_close(mt_sources *ss) {
  if (!ss) return;
  for (int i = 0; i < ss->n; i++) {
    mt_source *s = &ss->src[i];
    for (int f = 0; f < s->n_files; f++) mt_dataset_close(&s->files[f]);
    free(s->files);
    free(s->train);
    free(s->val);
  }
  free(ss->src);
  memset(ss, 0, sizeof *ss);
}

/* validating the views (not the files) keeps the error messages' offsets
 * and the scan's split over ranks what they were for one file */
int mt_sources_validate(const mt_sources *ss, int vocab, MPI_Comm comm, mt_err *e) {
  for (int i = 0; i < ss->n; i++) {
    const mt_source *s = &ss->src[i];
    for (int f = 0; f < s->n_train; f++) MT_TRY(e, mt_dataset_validate(&s->train[f], vocab, comm, e));
    for (int f = 0; f < s->n_val; f++) MT_TRY(e, mt_dataset_validate(&s->val[f], vocab, comm, e));
  }
  return 0;
}

/* a string into hash h */
static uint64_t hash_str(uint64_t h, const char *s) {
  for (; *s; s++) h = mt_splitmix64(h ^ (uint8_t)*s);
  return mt_splitmix64(h ^ 0xff);
}

uint64_t mt_sources_hash(const mt_sources *ss) {
  uint64_t h = mt_splitmix64((uint64_t)ss->n);
  for (int i = 0; i < ss->n; i++) {
    const mt_source *s = &ss->src[i];
    uint64_t w;
    memcpy(&w, &s->weight, sizeof w);
    h = mt_splitmix64(hash_str(h, s->name) ^ w ^ (uint64_t)s->synthetic_vocab);
    for (int k = 0; k < s->n_train; k++) {
      const mt_dataset *d = &s->train[k];
      const char *base = strrchr(d->path, '/');
      h = hash_str(h, base ? base + 1 : d->path);
      h = mt_splitmix64(h ^ (uint64_t)d->begin);
      h = mt_splitmix64(h ^ (uint64_t)d->end ^ ((uint64_t)d->format << 56));
    }
  }
  return h ? h : 1; /* 0 means "not recorded" */
}

int mt_sources_check(const mt_sources *ss, mt_err *e) {
  for (int i = 0; i < ss->n; i++)
    for (int f = 0; f < ss->src[i].n_files; f++) MT_TRY(e, mt_dataset_check(&ss->src[i].files[f], e));
  return 0;
}
