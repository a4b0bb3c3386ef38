/* Which NCCL communicators a rank makes, without NCCL: the point-to-point
 * links of a group and the memory estimate the plan counts (nccl.c makes
 * what these describe). Built with or without NCCL. */
#include "comm/comm.h"

#include <stdlib.h>
#include <string.h>

/* NCCL's defaults: ring channels of a communicator, channels of a two-rank
 * point-to-point one, and the size of each channel's buffer per direction */
#define NCCL_COLL_CHANNELS 16
#define NCCL_P2P_CHANNELS 2
#define NCCL_BUFFER_BYTES (4.0 * 1048576.0)

void mt_comm_nccl_needs(const mt_config *cfg, unsigned *groups, unsigned *p2p) {
  unsigned g = 0, p = 0;
  if (cfg->tp > 1) g |= 1u << MT_G_TP;
  if (cfg->dp * cfg->cp > 1) g |= 1u << MT_G_DP_CP;
  if (cfg->cp > 1 && cfg->cp_mode == MT_CP_ULYSSES) g |= 1u << MT_G_CP;
  if (cfg->moe_experts > 0) g |= 1u << MT_G_ETP | 1u << MT_G_EP | 1u << MT_G_EDP;
  /* the MoE router's per-sequence counts with cp > 1 */
  if (cfg->moe_experts > 0 && cfg->cp > 1) g |= 1u << MT_G_TP_CP;
  if (cfg->pp > 1) p |= MT_P2P_PP | MT_P2P_PP_TIED;
  if (cfg->cp > 1 && cfg->cp_mode == MT_CP_RING) p |= MT_P2P_CP_RING;
  *groups = g;
  *p2p = p;
}

int mt_comm_p2p_links(const char *name, int size, int rank, unsigned p2p, int *peers, int *tags) {
  int n = 0;
  if (size < 2) return 0;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const int ring[2] = {next, prev}, n_ring = next == prev ? 1 : 2;
  if (!strcmp(name, "pp") && (p2p & MT_P2P_PP))
    for (int k = 0; k < n_ring; k++) {
      peers[n] = ring[k], tags[n++] = MT_TAG_PP_ACT;
      peers[n] = ring[k], tags[n++] = MT_TAG_PP_GRAD;
    }
  /* tied gradients: the first and the last stage only */
  if (!strcmp(name, "pp") && (p2p & MT_P2P_PP_TIED) && (rank == 0 || rank == size - 1))
    peers[n] = rank == 0 ? size - 1 : 0, tags[n++] = MT_TAG_PP_TIED;
  if (!strcmp(name, "cp") && (p2p & MT_P2P_CP_RING))
    for (int k = 0; k < n_ring; k++) {
      peers[n] = ring[k], tags[n++] = MT_TAG_CP_KV;
      peers[n] = ring[k], tags[n++] = MT_TAG_CP_DKV;
    }
  return n;
}

double mt_comm_nccl_bytes(const mt_mesh_dims *dims, int world_rank, unsigned groups,
                          unsigned p2p) {
  const int world = dims->tp * dims->cp * dims->dp * dims->pp;
  int n_desc;
  const mt_group_desc *d = mt_mesh_groups(&n_desc);
  int *lists = mt_malloc((size_t)n_desc * (size_t)world * sizeof(int));
  int *lens = mt_calloc((size_t)n_desc, sizeof(int));
  double bytes = 0.0;
  for (int i = 0; i < n_desc; i++) {
    int *mine = lists + (size_t)i * world;
    int n = mt_mesh_group_members(dims, &d[i], world_rank, mine);
    if (n < 2) continue;
    int rank = 0;
    while (mine[rank] != world_rank) rank++;
    int peers[8], tags[8];
    int links = mt_comm_p2p_links(d[i].name, n, rank, p2p, peers, tags);
    bytes += links * 2.0 * NCCL_P2P_CHANNELS * NCCL_BUFFER_BYTES;
    if (groups && !(groups & (1u << d[i].id))) continue;
    int shared = 0; /* an earlier group with the same ranks in the same order */
    for (int j = 0; j < i && !shared; j++)
      shared = lens[j] == n && !memcmp(lists + (size_t)j * world, mine, (size_t)n * sizeof(int));
    lens[i] = n;
    if (!shared) bytes += 2.0 * NCCL_COLL_CHANNELS * NCCL_BUFFER_BYTES;
  }
  free(lists);
  free(lens);
  return bytes;
}
