/* meshtrain: train (or benchmark) a GPT on the device mesh.
 *
 *   mpirun -n 4 build/bin/meshtrain inputs/default.ini [--set section.key=value ...]
 *   meshtrain CONFIG --check --ranks N     validate for N ranks, no MPI
 *   meshtrain CONFIG --plan [--ranks N]    memory and bytes per rank, no MPI
 *
 * Every rank parses and validates the same configuration before the first
 * collective; any bad input ends every rank with one line from rank 0 and
 * exit code 2, before anything under output.dir is touched. The run itself
 * is lib/train's phases. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train.h"

static const char *PROG = "meshtrain";

static void usage(FILE *f) {
  fprintf(f,
          "usage: meshtrain CONFIG.ini [--set section.key=value ...]\n"
          "       meshtrain CONFIG.ini --check --ranks N [--set ...]\n"
          "       meshtrain CONFIG.ini --plan [--ranks N] [--plan-json FILE] [--set ...]\n"
          "       meshtrain CONFIG.ini --print-schedule [--set ...]\n"
          "       meshtrain --help | --help-markdown\n\n"
          "Trains a GPT on pp x dp x cp x tp MPI ranks (launch with mpirun/srun).\n"
          "Writes <output.dir>/metrics.jsonl (one line per step), summary.json and\n"
          "config.ini (the resolved configuration).\n"
          "--check validates the configuration for N ranks without MPI (what a launch checks\n"
          "before it starts; not data, memory or checkpoints; with train.device = virtual also\n"
          "whether this machine can start N ranks); --plan prints each pipeline stage's memory per rank by category and bytes\n"
          "per step per group, from the configuration alone (no MPI, any mesh size).\n"
          "Exit codes: 0 done, 2 bad input, 3 runtime failure, 75 stopped by SIGUSR1 after a\n"
          "checkpoint (requeue; resume with train.resume=auto), 76 stopped for good by SIGTERM\n"
          "after a checkpoint (scancel; not requeued), 130 stopped by SIGINT (Ctrl-C) after a\n"
          "checkpoint (a second Ctrl-C ends it at once).\n"
          "--help-markdown writes the keys below as a Markdown reference (docs/config.md).\n\n"
          "Keys (section.key, type, default):\n");
  mt_config_print_help(f);
}

typedef struct {
  const char *ini;
  char **over;
  int n_over;
  int help, help_markdown, check, plan, ranks;
  const char *plan_json;
} args;

/* parallel.layout = auto: the planner's layout for `world` ranks written into
 * cfg (every rank computes the same; rank 0 prints it with the runner-up);
 * 0, or -1 with e set (no cost profile, no layout that fits). */
static int plan_auto(mt_config *cfg, int world, int print, mt_err *e) {
  mt_search_row best, second;
  int n = 0;
  if (mt_plan_auto(cfg, world, &best, &second, &n, e) != 0) return -1;
  if (print) {
    char text[256];
    mt_search_layout_text(&best, text, sizeof text);
    printf("%s: parallel.layout = auto on %d ranks (%s; the fastest of %d priced): %s, predicted %.4g s a "
           "step, %.1f%% MFU\n",
           PROG, world, mt_plan_auto_hw(cfg), n, text,
           best.cost.step_s, 100 * best.cost.mfu);
    if (n > 1) {
      mt_search_layout_text(&second, text, sizeof text);
      printf("%s: runner-up: %s, predicted %.4g s a step\n", PROG, text, second.cost.step_s);
    }
    fflush(stdout);
  }
  return 0;
}

static void parse_args(int argc, char **argv, args *a, mt_err *e) {
  memset(a, 0, sizeof *a);
  a->over = mt_calloc((size_t)argc + 1, sizeof(char *));
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
      a->help = 1;
    } else if (strcmp(s, "--help-markdown") == 0) {
      a->help_markdown = 1;
    } else if (strcmp(s, "--set") == 0) {
      if (i + 1 >= argc) mt_err_set(e, "--set needs section.key=value");
      else a->over[a->n_over++] = argv[++i];
    } else if (strncmp(s, "--set=", 6) == 0) {
      a->over[a->n_over++] = argv[i] + 6;
    } else if (strcmp(s, "--print-schedule") == 0) {
      a->over[a->n_over++] = "parallel.print_schedule=true";
    } else if (strcmp(s, "--check") == 0) {
      a->check = 1;
    } else if (strcmp(s, "--plan") == 0) {
      a->plan = 1;
    } else if (strcmp(s, "--plan-json") == 0) {
      if (i + 1 >= argc) mt_err_set(e, "--plan-json needs a file name");
      else a->plan_json = argv[++i];
      a->plan = 1;
    } else if (strcmp(s, "--ranks") == 0) {
      char *end = NULL;
      const char *v = i + 1 < argc ? argv[i + 1] : "";
      long n = strtol(v, &end, 10);
      if (!*v || *end || n < 1 || n > 1 << 24)
        mt_err_set(e, "--ranks needs a rank count from 1 to %d, got '%s'", 1 << 24, v);
      else a->ranks = (int)n;
      i++;
    } else if (s[0] == '-') {
      mt_err_set(e, "unknown option '%s' (see --help)", s);
    } else if (!a->ini) {
      a->ini = s;
    } else {
      mt_err_set(e, "more than one config file given ('%s' and '%s')", a->ini, s);
    }
  }
  if (a->ranks && !a->check && !a->plan)
    mt_err_set(e, "--ranks goes with --check or --plan (a launched run has the ranks it was "
                  "started with)");
  else if (a->check && !a->ranks)
    mt_err_set(e, "--check needs --ranks N (the world size to check for)");
}

int main(int argc, char **argv) {
  mt_err err = {0};
  args a;
  parse_args(argc, argv, &a, &err);
  mt_config cfg;
  if (a.help_markdown && !err.failed) { /* the key table as docs/config.md, no MPI */
    free(a.over);
    mt_config_write_markdown(stdout);
    return fflush(stdout) == 0 && !ferror(stdout) ? MT_EXIT_OK : MT_EXIT_RUNTIME;
  }
  if (a.check || a.plan) { /* no MPI: one line on error, exit 2 */
    mt_log_init(0);
    if (!err.failed) mt_config_load(&cfg, a.ini, a.n_over, a.over, &err);
    free(a.over);
    if (!err.failed && cfg.layout == MT_LAYOUT_AUTO) { /* planned for --ranks */
      if (!a.ranks) mt_err_set(&err, "parallel.layout = auto needs --ranks N (the ranks to plan for)");
      else plan_auto(&cfg, a.ranks, 1, &err);
    }
    if (!err.failed && a.check) mt_plan_check_report(&cfg, a.ranks, stdout, &err);
    if (!err.failed && a.plan) mt_plan_report(&cfg, a.ranks, a.plan_json, stdout, &err);
    if (err.failed) fprintf(stderr, "%s: error: %s\n", PROG, err.msg);
    return err.failed ? MT_EXIT_BADINPUT : MT_EXIT_OK;
  }
  /* a stop signal from the start on only sets a flag (the run agrees on it
   * and exits 75 without losing anything) */
  mt_train_install_signals();
  /* FUNNELED: the asynchronous checkpoint writer runs a thread that makes no
   * MPI call while the main thread goes on with MPI */
  int thread_level = mt_mpi_init(&argc, &argv, MPI_THREAD_FUNNELED);
  int world_rank = mt_log_rank();
  if (a.help) {
    if (world_rank == 0) usage(stdout);
    free(a.over);
    MT_MPI_CHECK(MPI_Finalize());
    return 0;
  }
  if (!err.failed) mt_config_load(&cfg, a.ini, a.n_over, a.over, &err);
  free(a.over);
  if (!err.failed && cfg.print_schedule) { /* every pp rank's op list, on one process */
    mt_plan_print_schedule(&cfg, world_rank == 0 ? stdout : NULL, &err);
    mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
    MT_MPI_CHECK(MPI_Finalize());
    return 0;
  }
  /* a run started from another's parameters takes the model's shape from them */
  mt_err_agree(&err, MPI_COMM_WORLD);
  if (!err.failed && cfg.init_from[0]) mt_train_init_from_shape(&cfg, &err);
  if (!err.failed && cfg.ckpt_async && thread_level < MPI_THREAD_FUNNELED)
    mt_err_set(&err, "ckpt.async = true needs MPI_THREAD_FUNNELED, and this MPI provides "
                     "thread level %d (set ckpt.async = false)", thread_level);
  mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
  if (cfg.layout == MT_LAYOUT_AUTO) { /* rank 0 plans for the ranks launched; all take it */
    int world = 1;
    MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    if (world_rank == 0) plan_auto(&cfg, world, 1, &err);
    mt_err_check_all(&err, MPI_COMM_WORLD, PROG);
    MT_MPI_CHECK(MPI_Bcast(&cfg, (int)sizeof cfg, MPI_BYTE, 0, MPI_COMM_WORLD));
  }

  static mt_trainer t;
  mt_train_setup(&t, &cfg);
  mt_train_resume(&t);
  int code = mt_train_loop(&t);
  mt_train_summary(&t);
  mt_train_destroy(&t);
  MT_MPI_CHECK(MPI_Finalize());
  return code;
}
