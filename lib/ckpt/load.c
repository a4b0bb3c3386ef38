/* Resolve what to load and load it: model and tensor checks, then every
 * rank reads the hyperslabs its layout needs (load-time resharding). */
#include "ckpt/ckpt_internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* newest complete step directory under root; 0 if none */
static int newest_complete(const char *root, char *dir, size_t len) {
  DIR *d = opendir(root);
  if (!d) return 0;
  struct dirent *de;
  int64_t best = -1;
  while ((de = readdir(d))) {
    int64_t s;
    if (!mt_ckpt_parse_step_dir(de->d_name, &s) || s <= best) continue;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, de->d_name);
    mt_err ignore = {0};
    if (mt_ckpt_check_manifest(p, NULL, 0, NULL, &ignore) == 0) {
      best = s;
      snprintf(dir, len, "%s", p);
    }
  }
  closedir(d);
  return best >= 0;
}

int mt_ckpt_resolve(const char *spec, const char *root, char *dir, size_t dir_len, int *found,
                    mt_err *e) {
  mt_err local = {0};
  int have = 0;
  if (mt_log_rank() == 0) {
    if (!strcmp(spec, "auto")) {
      have = newest_complete(root, dir, dir_len);
    } else {
      char mpath[1100];
      snprintf(mpath, sizeof mpath, "%s/%s", spec, MT_CKPT_MANIFEST);
      if (mt_ckpt_file_size(spec) < 0) {
        mt_err_set(&local, "train.resume: %s: no such checkpoint", spec);
      } else if (mt_ckpt_file_size(mpath) >= 0) {
        snprintf(dir, dir_len, "%s", spec);
        have = mt_ckpt_check_manifest(dir, NULL, 0, NULL, &local) == 0;
      } else if (!(have = newest_complete(spec, dir, dir_len))) {
        mt_err_set(&local, "train.resume: %s holds no complete checkpoint (no %s)", spec,
                   MT_CKPT_MANIFEST);
      }
    }
  }
  MPI_Bcast(&have, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Bcast(dir, (int)dir_len, MPI_CHAR, 0, MPI_COMM_WORLD);
  *found = have;
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  return 0;
}

static int check_model(const char *dir, hid_t file, const mt_ckpt_meta *expect,
                       mt_ckpt_meta *m, mt_err *e) {
  char fmt[64] = "", version[32] = "";
  if (mt_ckpt_attr_str(file, "format", fmt, sizeof fmt) != 0 || strcmp(fmt, MT_CKPT_FORMAT) != 0) {
    mt_err_set(e, "%s: not a meshtrain checkpoint (format attribute '%s')", dir, fmt);
    return -1;
  }
  int major = 0, minor = 0, patch = 0;
  if (mt_ckpt_attr_str(file, "version", version, sizeof version) != 0 ||
      sscanf(version, "%d.%d.%d", &major, &minor, &patch) != 3) {
    mt_err_set(e, "%s: unreadable format version '%s'", dir, version);
    return -1;
  }
  if (major > MT_CKPT_VERSION_MAJOR) {
    mt_err_set(e, "%s: format version %s is newer than this meshtrain reads (%d.x)", dir,
               version, MT_CKPT_VERSION_MAJOR);
    return -1;
  }
  if (mt_ckpt_read_meta(file, m) != 0) {
    mt_err_set(e, "%s: checkpoint metadata incomplete", dir);
    return -1;
  }
  struct { const char *name; int64_t have, want; } shape[] = {
      {"n_layer", m->n_layer, expect->n_layer}, {"n_embd", m->n_embd, expect->n_embd},
      {"n_head", m->n_head, expect->n_head}, {"seq_len", m->seq_len, expect->seq_len},
      {"vocab", m->vocab, expect->vocab}};
  for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++)
    if (shape[i].have != shape[i].want) {
      mt_err_set(e, "%s is a checkpoint of another model: %s = %lld there, %lld in this run",
                 dir, shape[i].name, (long long)shape[i].have, (long long)shape[i].want);
      return -1;
    }
  return 0;
}

static int check_tensor(const char *dir, hid_t file, int g, const mt_tensor *t, mt_err *e) {
  char path[256];
  mt_ckpt_dataset_path(path, sizeof path, g, t->name);
  if (H5Lexists(file, mt_ckpt_group_path(g)[0] == 'm' ? "model" : "optim", H5P_DEFAULT) <= 0 ||
      H5Oexists_by_name(file, path, H5P_DEFAULT) <= 0) {
    mt_err_set(e, "%s: missing tensor %s", dir, path);
    return -1;
  }
  hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
  hid_t s = d >= 0 ? H5Dget_space(d) : -1;
  hsize_t dims[MT_MAX_DIMS] = {0};
  int nd = s >= 0 ? H5Sget_simple_extent_dims(s, dims, NULL) : -1;
  if (s >= 0) H5Sclose(s);
  if (d >= 0) H5Dclose(d);
  int same = nd == t->ndim;
  for (int k = 0; same && k < nd; k++) same = (int64_t)dims[k] == t->shape[k];
  if (!same) {
    char have[64] = "", want[64] = "";
    for (int k = 0; k < nd; k++)
      snprintf(have + strlen(have), sizeof have - strlen(have), "%s%llu", k ? "," : "",
               (unsigned long long)dims[k]);
    for (int k = 0; k < t->ndim; k++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", k ? "," : "",
               (long long)t->shape[k]);
    mt_err_set(e, "%s: tensor %s has shape [%s] in the checkpoint but [%s] in the model", dir,
               path, have, want);
    return -1;
  }
  return 0;
}

int mt_ckpt_load(const char *dir, const mt_registry *reg, mt_mesh *mesh, const mt_ckpt_state *st,
                 const mt_ckpt_meta *expect, int verify, mt_ckpt_meta *meta_out, mt_err *e) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  mt_err local = {0};
  char mode[32] = "";
  int64_t mstep = -1;
  /* every rank checks the manifest: cheap, and all then agree */
  mt_ckpt_check_manifest(dir, mode, sizeof mode, &mstep, &local);
  int per_writer = strcmp(mode, "per-writer") == 0;
  if (!local.failed && !per_writer && strcmp(mode, "shared") != 0)
    mt_err_set(&local, "%s: checkpoint mode '%s' cannot be read by this build", dir, mode);
  if (!local.failed && per_writer && mesh->world_rank == 0) mt_ckpt_check_shard_files(dir, &local);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  /* shared: one parallel open, collective reads. per-writer: every rank opens
   * the index on its own and reads through its virtual datasets (parallel
   * HDF5 cannot read virtual datasets). */
  char file_path[1100];
  snprintf(file_path, sizeof file_path, "%s/%s", dir, per_writer ? MT_CKPT_INDEX_FILE : MT_CKPT_SHARED_FILE);
  hid_t fapl = per_writer ? H5Pcreate(H5P_FILE_ACCESS) : mt_ckpt_fapl_mpio(MPI_COMM_WORLD);
  hid_t file = H5Fopen(file_path, H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  int open_failed = file < 0;
  MPI_Allreduce(MPI_IN_PLACE, &open_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (open_failed) {
    if (file >= 0) H5Fclose(file);
    mt_err_set(&local, "%s: cannot open as HDF5 (truncated or corrupt?)", file_path);
    *e = local;
    return -1;
  }
  mt_ckpt_meta m;
  memset(&m, 0, sizeof m);
  if (check_model(dir, file, expect, &m, &local) == 0 && m.step != mstep)
    mt_err_set(&local, "%s: the file says step %lld, the manifest step %lld", dir,
               (long long)m.step, (long long)mstep);
  for (int g = 0; g < MT_CKPT_NGROUPS && !local.failed; g++)
    for (int i = 0; i < reg->n && !local.failed; i++) check_tensor(dir, file, g, &reg->t[i], &local);
  if (!local.failed && verify) mt_ckpt_verify_checksums(dir, file, reg, mesh, &local);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    H5Fclose(file);
    *e = local;
    return -1;
  }
  /* read what this rank needs, tensor by tensor (collective) */
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  if (!per_writer) H5Pset_dxpl_mpio(dxpl, mt_ckpt_tensor_io_mode());
  mt_ckpt_sel sel = {0};
  float *staging = NULL;
  size_t cap = 0;
  int ok = 1;
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    for (int i = 0; i < reg->n; i++) {
      const mt_tensor *t = &reg->t[i];
      mt_ckpt_view_t v;
      mt_ckpt_view(t, reg->tp_size, &v);
      mt_ckpt_sel_build(&sel, t, &v, st->ranges[g], st->n_ranges[g]);
      float *direct = mt_ckpt_sel_contiguous(&sel, v.local_ext[1]);
      if (!direct && sel.volume > cap) {
        free(staging);
        cap = sel.volume;
        staging = mt_malloc(cap * sizeof(float));
      }
      char path[256];
      mt_ckpt_dataset_path(path, sizeof path, g, t->name);
      hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
      hid_t fs = H5Dget_space(d);
      mt_ckpt_select_boxes(fs, &sel.boxes);
      hid_t ms = mt_ckpt_mem_space(sel.volume);
      float dummy;
      float *into = direct ? direct : staging ? staging : &dummy;
      if (d < 0 || H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, dxpl, into) < 0) ok = 0;
      H5Sclose(ms);
      H5Sclose(fs);
      if (d >= 0) H5Dclose(d);
      if (!direct) mt_ckpt_sel_copy(&sel, staging, v.local_ext[1], 1);
    }
  }
  free(staging);
  mt_ckpt_sel_free(&sel);
  H5Pclose(dxpl);
  H5Fclose(file);
  if (!ok) mt_err_set(&local, "%s: reading tensors failed (HDF5 error)", file_path);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  if (meta_out) *meta_out = m;
  return 0;
}
