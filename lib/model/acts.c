/* Where a micro-batch's activations live: the pieces of an activation set
 * (one order for counting and binding) and one layer's place in a set. */
#include "model/model_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* activation sets                                                     */
/* A set holds one micro-batch's activations of a layer range [l0, l1): the
 * activations of layer l0 + j in slot j, the range's input in a->encoded.
 * The whole model's m->a is the set of [0, n_layer) with the head. */

typedef struct {
  size_t n, es;  /* elements, bytes of one */
  mt_act **adst; /* a piece in the activations' dtype (m->es bytes an element) */
  float **dst;   /* fp32 always (statistics, losses, the MoE router's) */
  int **idst;    /* an int piece (4 bytes an element, like a float) */
} act_piece;

#define APIECE(field, count) p[k++] = (act_piece){.n = (count), .es = m->es, .adst = &a->field}
#define PIECE(field, count) p[k++] = (act_piece){.n = (count), .es = 4, .dst = &a->field}
#define IPIECE(field, count) p[k++] = (act_piece){.n = (count), .es = 4, .idst = &a->field}

/* the head's pieces (the final norm, the logits, the losses) after k others */
static int head_pieces(const mt_gpt *m, mt_gpt_acts *a, int B, act_piece *p, int k) {
  const size_t BT = (size_t)B * (size_t)m->T, BTs = (size_t)B * (size_t)m->T_sp;
  APIECE(lnf, BTs * (size_t)m->shape.n_embd);
  PIECE(lnf_mean, BTs);
  PIECE(lnf_rstd, BTs);
  APIECE(logits, BT * (size_t)m->V_local);
  PIECE(losses, BT);
  return k;
}

/* the pieces of a set, in one order for numel and bind */
static int act_pieces(const mt_gpt *m, mt_gpt_acts *a, int n_layers, int B, int with_head,
                      mt_act_set_kind kind, act_piece *p) {
  size_t T = (size_t)m->T, C = (size_t)m->shape.n_embd, L = (size_t)n_layers;
  size_t BT = (size_t)B * T, BTs = (size_t)B * (size_t)m->T_sp;
  size_t Cl = (size_t)m->C_local, Fl = (size_t)m->F_local, NHl = (size_t)m->NH_local;
  size_t W = (size_t)m->qkv_local, Fin = (size_t)m->mlp_in;
  /* under recompute a kept set holds each layer's output (the next one's input) only */
  int inner = kind == MT_SET_WORKSPACE || !m->recompute;
  int k = 0;
  /* the ladder: the range's input, then the previous block's pending MLP
   * output (a range after block 0: the stage before sent both) */
  APIECE(encoded, (mt_model_ladder(&m->shape) ? 2 : 1) * BTs * C);
  if (inner) {
    APIECE(ln1, L * BTs * C);
    PIECE(ln1_mean, L * BTs);
    PIECE(ln1_rstd, L * BTs);
    APIECE(qkv, L * BT * 3 * Cl);
    APIECE(atty, L * BT * Cl);
    /* (token slices: the pass's T_local / slices rows) */
    const size_t sl = m->attn.slices > 1 ? (size_t)m->attn.slices : 1;
    PIECE(lse, L * mt_cp_saved_numel(&m->attn.lay, B, (int)Cl, (int)NHl, 0) / sl);
    if (mt_cp_saved_numel(&m->attn.lay, B, (int)Cl, (int)NHl, 1)) { /* Ulysses */
      APIECE(att_qkv, L * mt_cp_saved_numel(&m->attn.lay, B, (int)Cl, (int)NHl, 1) / sl);
      APIECE(att_out, L * mt_cp_saved_numel(&m->attn.lay, B, (int)Cl, (int)NHl, 2) / sl);
    }
    APIECE(attproj, L * BTs * C);
    APIECE(residual2, L * BTs * C);
    APIECE(ln2, L * BTs * C);
    PIECE(ln2_mean, L * BTs);
    PIECE(ln2_rstd, L * BTs);
    APIECE(fch, L * BT * Fl * Fin);
    APIECE(fch_gelu, L * BT * Fl);
    APIECE(fcproj, L * BTs * C);
  }
  /* the ladder under recompute: each layer's MLP output too (the next
   * layer reads it, forward and backward) */
  if (!inner && kind == MT_SET_KEPT && mt_model_ladder(&m->shape)) APIECE(fcproj, L * BTs * C);
  APIECE(residual3, L * BTs * C);
  if (with_head) k = head_pieces(m, a, B, p, k);
  if (kind == MT_SET_KEPT && m->split_backward) {
    APIECE(dy_qkv, L * BT * W);
    APIECE(dy_attproj, L * BT * C);
    APIECE(dy_fc, L * BT * Fl * Fin);
    APIECE(dy_fcproj, L * BT * C);
  }
  /* MoE blocks: slot m of the set for its m-th MoE block (a set of n blocks
   * holds the most any n consecutive blocks have) */
  size_t Lm = !inner ? 0
              : kind == MT_SET_WORKSPACE ? (size_t)(m->moe.n_blocks > 0)
                                         : (size_t)m->moe_window_of[n_layers];
  if (Lm > 0) {
    const size_t N = (size_t)B * (size_t)m->moe.Ts, E = (size_t)m->moe.E;
    const size_t kk = (size_t)m->moe.k, send = N * kk;
    PIECE(moe_probs, Lm * N * E);
    PIECE(moe_lse, Lm * N);
    IPIECE(moe_top, Lm * N * kk);
    IPIECE(moe_slot, Lm * N * kk);
    PIECE(moe_topw, Lm * N * kk);
    PIECE(moe_frac, Lm * (size_t)B * E);
    IPIECE(moe_meta, Lm * (size_t)m->moe.meta_n);
    APIECE(moe_ys, Lm * send * C);
  }
  /* (the rows that grow with the routing: mt_moe_rows, below) */
  return k;
}
#undef APIECE
#undef PIECE
#undef IPIECE

/* a piece's bytes, rounded up to 64 (every piece 64-byte aligned) */
static size_t piece_bytes(const act_piece *p) { return (p->n * p->es + 63) / 64 * 64; }

size_t mt_act_set_numel(const mt_gpt *m, int n_layers, int B, int with_head, mt_act_set_kind k) {
  mt_gpt_acts a;
  act_piece p[48];
  int n_p = act_pieces(m, &a, n_layers, B, with_head, k, p);
  size_t bytes = 0;
  for (int i = 0; i < n_p; i++) bytes += piece_bytes(&p[i]);
  return bytes / sizeof(float);
}

/* the pieces' pointers, carved out of mem one after the other */
static void bind_pieces(const act_piece *p, int n_p, void *mem) {
  char *at = mem;
  for (int i = 0; i < n_p; i++) {
    if (p[i].adst) *p[i].adst = at;
    else if (p[i].dst) *p[i].dst = (float *)at;
    else *p[i].idst = (int *)at;
    at += piece_bytes(&p[i]);
  }
}

void mt_act_set_bind(const mt_gpt *m, mt_gpt_acts *a, void *mem, int n_layers, int B,
                     int with_head, mt_act_set_kind k) {
  memset(a, 0, sizeof *a);
  act_piece p[48];
  bind_pieces(p, act_pieces(m, a, n_layers, B, with_head, k, p), mem);
}

size_t mt_gpt_acts_numel(const mt_gpt *m, int n_layers, int B, int with_head) {
  return mt_act_set_numel(m, n_layers, B, with_head, MT_SET_KEPT);
}

void mt_gpt_acts_bind(const mt_gpt *m, mt_gpt_acts *a, void *mem, int n_layers, int B,
                      int with_head) {
  mt_act_set_bind(m, a, mem, n_layers, B, with_head, MT_SET_KEPT);
}

size_t mt_gpt_head_acts_numel(const mt_gpt *m, int B) {
  mt_gpt_acts a;
  act_piece p[8];
  int n_p = head_pieces(m, &a, B, p, 0);
  size_t bytes = 0;
  for (int i = 0; i < n_p; i++) bytes += piece_bytes(&p[i]);
  return bytes / sizeof(float);
}

void mt_gpt_head_acts_bind(const mt_gpt *m, mt_gpt_acts *a, void *mem, int B) {
  act_piece p[8];
  bind_pieces(p, head_pieces(m, a, B, p, 0), mem);
}

mt_act *mt_gpt_range_output(const mt_gpt *m, const mt_gpt_acts *a, int n_layers, int B) {
  return mt_act_at(m->es, a->residual3, (size_t)(n_layers - 1) * B * m->T_sp * m->shape.n_embd);
}

size_t mt_gpt_stage_msg_numel(const mt_gpt *m, int B) {
  return (mt_model_ladder(&m->shape) ? 2 : 1) * (size_t)B * m->T_sp * m->shape.n_embd;
}

void mt_gpt_stage_pack_output(const mt_gpt *m, const mt_gpt_acts *a, int l0, int l1, int B,
                              mt_act *dst) {
  const size_t n = (size_t)B * m->T_sp * m->shape.n_embd;
  m->ops->copy(m->dt, dst, mt_gpt_range_output(m, a, l1 - l0, B), n);
  if (mt_model_ladder(&m->shape))
    m->ops->copy(m->dt, mt_act_at(m->es, dst, n), mt_layer_at(m, a, l1 - 1, l0, B).fcproj, n);
}

void mt_gpt_stage_pack_input_grad(const mt_gpt *m, int B, mt_act *dst) {
  const size_t n = (size_t)B * m->T_sp * m->shape.n_embd;
  m->ops->copy(m->dt, dst, m->d.residual3, n);
  if (m->d.fcproj) m->ops->copy(m->dt, mt_act_at(m->es, dst, n), m->d.fcproj, n);
}

/* ------------------------------------------------------------------ */
/* the MoE rows that grow with the routing                             */
/* A set's MoE slots hold what a micro-batch's routing fixes the size of
 * (the router's outputs, the routing record, the outputs that came back);
 * what grows with the rows a rank receives is held per (set, slot) apart,
 * in one backend allocation each, made at the slot's first routing at the
 * model's row bound and remade larger when a routing brings more. A slot's
 * rows are written only after its routing (the forward, or its recompute;
 * the split backward's input pass), so a remade allocation loses nothing. */

/* the pieces of an allocation of rows rows, 64-byte aligned: perm, inv,
 * xe, h, g (forward) or dy, dh (the split backward's) */
static int rows_pieces(const mt_gpt *m, int grads, size_t rows, size_t *bytes) {
  const size_t C = (size_t)m->moe.C, Fe = (size_t)m->moe.Fe_local, Fin = (size_t)m->mlp_in;
  const size_t es = m->es;
  int n = 0;
  if (!grads) {
    bytes[n++] = rows * sizeof(int);
    bytes[n++] = rows * sizeof(int);
  }
  bytes[n++] = rows * C * es;
  bytes[n++] = rows * Fe * Fin * es;
  if (!grads) bytes[n++] = rows * Fe * es;
  for (int i = 0; i < n; i++) bytes[i] = (bytes[i] + 63) / 64 * 64;
  return n;
}

size_t mt_moe_rows_bytes(const mt_gpt *m, int grads, size_t rows) {
  size_t b[5], sum = 0;
  int n = rows_pieces(m, grads, rows, b);
  for (int i = 0; i < n; i++) sum += b[i];
  return sum;
}

size_t mt_gpt_moe_rows_bytes(const mt_gpt *m) {
  return m->moe.n_blocks > 0 ? mt_moe_rows_bytes(m, 0, m->moe.rows) : 0;
}

/* the entry of (set, slot), made (without memory) at its first use */
static mt_moe_rows *rows_find(const mt_gpt *m, const void *set, int slot, int grads) {
  mt_moe_rows_store *st = m->moe.store;
  for (int i = 0; i < st->n; i++)
    if (st->b[i]->set == set && st->b[i]->slot == slot && st->b[i]->grads == grads)
      return st->b[i];
  if (st->n == st->cap) {
    st->cap = st->cap ? 2 * st->cap : 16;
    st->b = realloc(st->b, (size_t)st->cap * sizeof *st->b);
    if (!st->b) mt_die("out of memory (MoE rows)");
  }
  mt_moe_rows *r = mt_calloc(1, sizeof *r);
  *r = (mt_moe_rows){.set = set, .slot = slot, .grads = grads};
  return st->b[st->n++] = r;
}

void mt_moe_rows_bind(const mt_gpt *m, mt_moe_acts *o) {
  o->perm = o->inv = NULL;
  o->xe = o->h = o->g = o->dy = o->dh = NULL;
  size_t b[5];
  if (o->fwd && o->fwd->mem) {
    rows_pieces(m, 0, o->fwd->rows, b);
    char *at = o->fwd->mem;
    o->perm = (int *)at, at += b[0];
    o->inv = (int *)at, at += b[1];
    o->xe = at, at += b[2];
    o->h = at, at += b[3];
    o->g = at;
  }
  if (o->grads && o->grads->mem) {
    rows_pieces(m, 1, o->grads->rows, b);
    o->dy = o->grads->mem;
    o->dh = (char *)o->grads->mem + b[0];
  }
}

/* r holding at least rows rows (its contents are not kept) */
static void rows_fit(const mt_gpt *m, mt_moe_rows *r, size_t rows) {
  if (!r || (r->mem && r->rows >= rows)) return;
  if (r->mem) m->ops->free(MT_MEM_ACTIV, r->mem, r->bytes);
  r->rows = rows;
  r->bytes = mt_moe_rows_bytes(m, r->grads, rows);
  r->mem = m->ops->alloc(MT_MEM_ACTIV, r->bytes);
}

void mt_moe_rows_fit(const mt_gpt *m, mt_moe_acts *o, int grads) {
  rows_fit(m, grads ? o->grads : o->fwd, m->moe.rows);
  mt_moe_rows_bind(m, o);
}

void mt_moe_rows_free(const mt_gpt *m) {
  mt_moe_rows_store *st = m->moe.store;
  if (!st) return;
  for (int i = 0; i < st->n; i++) {
    if (st->b[i]->mem) m->ops->free(MT_MEM_ACTIV, st->b[i]->mem, st->b[i]->bytes);
    free(st->b[i]);
  }
  free(st->b);
  free(st);
}

/* layer l of a set holding the range that starts at l0 */
mt_layer_acts mt_layer_at(const mt_gpt *m, const mt_gpt_acts *a, int l, int l0, int B) {
  const size_t j = (size_t)(l - l0);
  const size_t T = (size_t)m->T, C = (size_t)m->shape.n_embd, BT = (size_t)B * T;
  const size_t BTs = (size_t)B * (size_t)m->T_sp, btc = BTs * C;
  const size_t Cl = (size_t)m->C_local, Fl = (size_t)m->F_local, NHl = (size_t)m->NH_local;
  const size_t W = (size_t)m->qkv_local, Fin = (size_t)m->mlp_in;
  const mt_gpt_acts *w = m->recompute ? &m->ws : a;
  const size_t i = m->recompute ? 0 : j;
  const size_t es = m->es;
  mt_layer_acts x = {.ln1 = mt_act_at(es, w->ln1, i * btc), .ln1_mean = w->ln1_mean + i * BTs,
                     .ln1_rstd = w->ln1_rstd + i * BTs,
                     .qkv = mt_act_at(es, w->qkv, 3 * i * BT * Cl),
                     .atty = mt_act_at(es, w->atty, i * BT * Cl),
                     .attproj = mt_act_at(es, w->attproj, i * btc),
                     .res2 = mt_act_at(es, w->residual2, i * btc),
                     .ln2 = mt_act_at(es, w->ln2, i * btc),
                     .ln2_mean = w->ln2_mean + i * BTs, .ln2_rstd = w->ln2_rstd + i * BTs,
                     .fch = mt_act_at(es, w->fch, i * BT * Fl * Fin),
                     .fchg = mt_act_at(es, w->fch_gelu, i * BT * Fl),
                     .fcproj = mt_act_at(es, w->fcproj, i * btc),
                     .res3 = mt_act_at(es, a->residual3, j * btc),
                     .att = {.lse = w->lse + i * (size_t)B * NHl * T}};
  if (a->fcproj && w != a) x.fcproj = mt_act_at(es, a->fcproj, j * btc); /* ladder, recompute */
  if (w->att_qkv) { /* Ulysses */
    x.att.qkv_h = mt_act_at(es, w->att_qkv, 3 * i * BT * Cl);
    x.att.out_h = mt_act_at(es, w->att_out, i * BT * Cl);
  }
  if (m->split_backward && a->dy_qkv) {
    x.dy_qkv = mt_act_at(es, a->dy_qkv, j * BT * W);
    x.dy_attproj = mt_act_at(es, a->dy_attproj, j * BT * C);
    x.dy_fc = mt_act_at(es, a->dy_fc, j * BT * Fl * Fin);
    x.dy_fcproj = mt_act_at(es, a->dy_fcproj, j * BT * C);
  }
  if (mt_model_is_moe(&m->shape, l)) {
    const size_t mi = m->recompute ? 0
                                   : (size_t)(mt_model_moe_before(&m->shape, l) -
                                              mt_model_moe_before(&m->shape, l0));
    const size_t N = (size_t)B * (size_t)m->moe.Ts, E = (size_t)m->moe.E;
    const size_t k = (size_t)m->moe.k, send = N * k;
    mt_moe_acts *o = &x.moe;
    x.is_moe = 1;
    o->probs = w->moe_probs + mi * N * E;
    o->lse = w->moe_lse + mi * N;
    o->top = w->moe_top + mi * N * k;
    o->slot = w->moe_slot + mi * N * k;
    o->topw = w->moe_topw + mi * N * k;
    o->frac = w->moe_frac + mi * (size_t)B * E;
    o->meta = w->moe_meta + mi * (size_t)m->moe.meta_n;
    o->ys = mt_act_at(es, w->moe_ys, mi * send * C);
    o->fwd = rows_find(m, w, (int)mi, 0);
    if (m->split_backward && a->dy_qkv) { /* the kept set's slot, also under recompute */
      const int mk = mt_model_moe_before(&m->shape, l) - mt_model_moe_before(&m->shape, l0);
      o->grads = rows_find(m, a, mk, 1);
    }
    mt_moe_rows_bind(m, o);
  }
  return x;
}

/* the input hidden state (BTs,C) of slot j: the range's input or slot j-1's output */
const mt_act *mt_layer_input(const mt_gpt *m, const mt_gpt_acts *a, size_t j, int B) {
  return j == 0 ? a->encoded
                : mt_act_at(m->es, a->residual3, (j - 1) * (size_t)B * m->T_sp * m->shape.n_embd);
}
