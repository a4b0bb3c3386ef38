/* meshreport's CSV files (report.h): runs.csv, one row per run, failed ones
 * included with their status; summary.csv, one row per point (mean, spread,
 * speedup, efficiency, MFU, the step-time breakdown, the prediction beside
 * the measurement, with its own speedup and efficiency); bench.csv, one row
 * per collective, ranks and size. A virtual-device run is a row of runs.csv
 * with its status (predicted ...) and no measured figures. Numbers as %.9g,
 * NaN as an empty field. */
#include "report/report.h"

#include <math.h>

void mt_report_write_csvs(const char *out, const report *r, const point_rec *pts, int n_pts) {
  char path[PATH_LEN];
  FILE *f = open_out(out, "runs.csv", path);
  fprintf(f, "id,dir,status,ok,nodes,ranks,layout,repeat,tokens_per_s,tokens_per_s_per_rank,"
             "mean_step_s,mfu,final_loss");
  for (int c = 0; c < N_PARTS; c++) fprintf(f, ",%s_s", mt_report_parts[c]);
  fprintf(f, ",attempts,restarts,lost_s,requeue_wait_s,oversubscribed\n");
  for (int i = 0; i < r->n_runs; i++) {
    const run_rec *x = &r->runs[i];
    if (x->is_bench) continue;
    char status[256];
    copy_str(status, sizeof status, x->status);
    for (char *c = status; *c; c++)
      if (*c == ',' || *c == '"') *c = ';';
    fprintf(f, "%s,%s,%s,%d,%d,%d,%s,%d", x->id, x->dir, status, x->ok, x->nodes, x->ranks,
            x->layout, x->repeat);
    if (x->ok) {
      csv_num(f, x->tokens_per_s), csv_num(f, x->tokens_per_s_per_rank);
      csv_num(f, x->mean_step_s), csv_num(f, x->mfu), csv_num(f, x->final_loss);
      for (int c = 0; c < N_PARTS; c++) csv_num(f, x->part_s[c]);
      fprintf(f, ",%d,%d", x->n_attempts ? x->n_attempts : 1, x->restarts);
      csv_num(f, x->lost_s), csv_num(f, x->wait_s);
      fprintf(f, ",%d", x->oversubscribed);
    } else {
      for (int c = 0; c < 5 + N_PARTS + 5; c++) fputc(',', f);
    }
    fputc('\n', f);
  }
  close_out(f, path);

  f = open_out(out, "summary.csv", path);
  fprintf(f, "nodes,ranks,layout,runs_ok,runs,tokens_per_s_mean,tokens_per_s_std,tokens_per_s_min,"
             "tokens_per_s_max,tokens_per_s_per_rank,step_s_mean,speedup,efficiency,mfu_mean");
  for (int c = 0; c < N_PARTS; c++) fprintf(f, ",%s_s", mt_report_parts[c]);
  fprintf(f, ",predicted_tokens_per_s,predicted_step_s,predicted_mfu,measured_over_predicted,"
             "predicted_speedup,predicted_efficiency\n");
  for (int k = 0; k < n_pts; k++) {
    const point_rec *p = &pts[k];
    fprintf(f, "%d,%d,%s,%d,%d", p->nodes, p->ranks, p->layout, p->n_ok, p->n_total);
    if (p->n_ok) {
      double v[] = {p->tps_mean, p->tps_std, p->tps_min,      p->tps_max, p->tps_per_rank,
                    p->step_s,   p->speedup, p->efficiency, p->mfu};
      for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) csv_num(f, v[i]);
      for (int c = 0; c < N_PARTS; c++) csv_num(f, p->part_s[c]);
    } else {
      for (int c = 0; c < 9 + N_PARTS; c++) fputc(',', f);
    }
    csv_num(f, p->n_pred ? p->pred_tps : NAN), csv_num(f, p->n_pred ? p->pred_step_s : NAN);
    csv_num(f, p->n_pred ? p->pred_mfu : NAN);
    csv_num(f, p->n_pred && p->n_ok ? p->tps_mean / p->pred_tps : NAN);
    csv_num(f, p->pred_speedup), csv_num(f, p->pred_efficiency);
    fputc('\n', f);
  }
  close_out(f, path);

  if (r->n_bench) {
    f = open_out(out, "bench.csv", path);
    fprintf(f, "run,op,nodes,ranks,bytes,time_us,algbw_gbs,busbw_gbs,wrong\n");
    for (int i = 0; i < r->n_bench; i++) {
      const bench_rec *b = &r->bench[i];
      fprintf(f, "%s,%s,%d,%d,%.0f", b->run, b->op, b->nodes, b->ranks, b->bytes);
      csv_num(f, b->time_us), csv_num(f, b->algbw), csv_num(f, b->busbw), csv_num(f, b->wrong);
      fputc('\n', f);
    }
    close_out(f, path);
  }
}
