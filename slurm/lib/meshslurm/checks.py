"""What is checked before a job is written, so that a job that would fail at
start is refused now and not after the queue wait:

  train jobs    meshtrain --check for the job's rank count (keys, values,
                model shape, mesh, batch, pipeline), then the data files:
                they exist (relative paths from the job's working directory)
                and their largest token id fits the model's vocabulary
                (meshdata info reads them);
  ckpt-convert  meshckpt ARGS --check: its arguments parsed and the
                checkpoint read as the job's meshckpt would, --target
                checked against the model.

Refusals are one line: the tool's own message, then a hint that names the
option of this command that fixes it where there is one."""
import configparser
import json
import math
import os
import re
import shlex
import subprocess

from .common import (EXIT_BADINPUT, BadInput, Failure, layout_name, parse_assignment,
                     parse_layout)

NO_CHECK = "--no-check skips the checks"


class Checker:
    """Runs the built tools (bin_dir) in the job's working directory; each
    distinct question is asked once (a campaign's points share data files)."""

    def __init__(self, bin_dir, workdir):
        self.bin_dir, self.workdir = bin_dir, workdir
        self.cache = {}

    def exe(self, name, what):
        path = os.path.join(self.bin_dir, name)
        if not os.access(path, os.X_OK):
            raise BadInput("%s: cannot check it: no %s (build first: bash apps/scripts/setup.sh; or "
                           "--bin DIR; %s)" % (what, path, NO_CHECK))
        return path

    def run(self, argv, what):
        key = tuple(argv)
        if key not in self.cache:
            try:
                self.cache[key] = subprocess.run(argv, cwd=self.workdir, stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE, universal_newlines=True,
                                                 timeout=600)
            except (OSError, subprocess.SubprocessError) as e:
                raise Failure("%s: cannot run %s: %s (%s)" % (what, argv[0], e, NO_CHECK))
        return self.cache[key]

    def refuse(self, r, tool, what, hint=None):
        """r failed: bad input (exit 2 with the tool's error line) or not"""
        lines = r.stderr.strip().splitlines()
        errors = [l for l in lines if l.startswith(tool + ": error: ")]
        if r.returncode == EXIT_BADINPUT and errors:
            h = hint(errors[0]) if hint else None
            raise BadInput("%s: %s%s" % (what, errors[0], " (%s)" % h if h else ""))
        raise Failure("%s: %s exited with %d%s (is the build's environment loaded? %s)"
                      % (what, tool, r.returncode, ": " + lines[-1] if lines else "", NO_CHECK))

    # ---- train jobs

    def train(self, config, sets, res, lay, what, system=None, job=None):
        """meshtrain --check for res["ranks"] ranks (a planned layout: its
        choice goes into lay["planned"]), the memory of its layout on the
        system's GPUs, then the data files"""
        exe = self.exe("meshtrain", what)
        argv = [exe] + ([config] if config else [])
        for s in sets:
            argv += ["--set", s]

        def check(extra, ranks):
            more = [x for e in extra for x in ("--set", e)]
            cmd = argv[:1] + ["--check"] + argv[1:] + more + ["--ranks", str(ranks)]
            return self.run(cmd, what).returncode == 0

        r = self.run(argv[:1] + ["--check"] + argv[1:] + ["--ranks", str(res["ranks"])], what)
        if r.returncode != 0:
            self.refuse(r, "meshtrain", what, lambda msg: train_hint(msg, res, lay, check))
        if lay.get("planner"):
            m = re.search(r"parallel\.layout = auto on \d+ ranks \([^)]*\): (\S+), predicted", r.stdout)
            if not m:
                raise Failure("%s: meshtrain --check printed no planned layout (%s)" % (what, NO_CHECK))
            lay["planned"] = parse_layout(m.group(1), res["ranks"], "planned layout")
        if system is not None:
            self.memory(config, sets, res, lay, what, system, job)
        keys = ("data.train", "data.val", "data.format")
        vals = config_values(config, sets, keys, {})
        if not vals["data.train"]:  # meshtrain's default file (asking costs an MPI start)
            vals = config_values(config, sets, keys, self.defaults(exe, what))
        files = [(k, vals[k]) for k in ("data.train", "data.val") if vals[k]]
        if not files:
            return
        # the vocabulary, as the run counts it: the plan's model line (V=...)
        r = self.run(argv + ["--plan", "--ranks", str(res["ranks"])], what)
        m = re.search(r"\bV=(\d+)", r.stdout)
        if r.returncode != 0 or not m:
            self.refuse(r, "meshtrain", what)
        vocab = int(m.group(1))
        for key, path in files:
            self.data_file(key, path, vals["data.format"] or "auto", vocab, what)

    def memory(self, config, sets, res, lay, what, system, job):
        """The plan's memory check of the job's layout (hand-set or planned)
        against the memory of one of the system's GPUs (meshplan --only on
        the system's hardware profile): a job that would run out of memory
        on its first step is refused now, not after the queue wait. CPU
        systems (no GPUs, or train.device = cpu) are left to meshtrain's
        own check at start."""
        if not system.gpus_per_node or not system.hw:
            return
        if config_values(config, sets, ("train.device",), {})["train.device"] == "cpu":
            return
        exe = self.exe("meshplan", what)
        argv = [exe] + ([config] if config else [])
        for s in sets:
            argv += ["--set", s]
        lay_now = lay.get("planned") or lay
        if lay.get("planned"):  # price the planned layout as the run will take it
            argv += ["--set", "parallel.layout=manual"]
            for axis in ("dp", "tp", "pp", "cp"):
                argv += ["--set", "parallel.%s=%d" % (axis, lay_now[axis])]
            for _, key, v in lay_now["settings"]:
                argv += ["--set", "%s=%s" % (key, v)]
        r = self.run(argv + ["--hw", system.hw, "--only"], what)
        if r.returncode == 0:
            return
        line = next((l for l in r.stderr.splitlines() if "does not fit" in l), None)
        m = re.search(r"([\d.]+) GiB of a device", line or "")
        try:
            row = json.loads(r.stdout)
        except ValueError:
            row = None
        if r.returncode != EXIT_BADINPUT or not m or not isinstance(row, dict):
            self.refuse(r, "meshplan", what)
        gib = 1024.0 ** 3
        raise BadInput("%s: layout %s needs %.1f GiB per GPU (and %.1f GiB of headroom, "
                       "plan.headroom), more than the %g GiB of a %s GPU (meshplan --only --hw %s; "
                       "less: more tp or pp, parallel.zero, train.recompute=true, a smaller "
                       "train.micro_batch, more nodes, or --set parallel.layout=auto)"
                       % (what + (": " + job if job else ""), layout_name(lay), row["mem_bytes"] / gib,
                          row["headroom_bytes"] / gib, float(m.group(1)), system.name, system.hw))

    def defaults(self, exe, what):
        """meshtrain's defaults of the keys it lists in --help"""
        r = self.run([exe, "--help"], what)
        out = {}
        for line in r.stdout.splitlines():
            m = re.match(r"\s+([a-z_]+\.[a-z_0-9]+)\s+\S+\s+default (\S*)", line)
            if m:
                out[m.group(1)] = "" if m.group(2) == '""' else m.group(2)
        return out

    def data_file(self, key, path, fmt, vocab, what):
        full = path if os.path.isabs(path) else os.path.join(self.workdir, path)
        if not os.path.isfile(full):
            raise BadInput("%s: %s = %s: no such file%s (make it first, e.g. build/bin/meshdata "
                           "corpus %s, or --set %s=FILE)"
                           % (what, key, path, "" if os.path.isabs(path) else
                              " under the job's working directory %s" % self.workdir, full, key))
        r = self.run([self.exe("meshdata", what), "info", full, "--format", fmt], what)
        if r.returncode != 0:
            self.refuse(r, "meshdata", "%s: %s = %s" % (what, key, path))
        m = re.search(r"^max token id:\s*(\d+)", r.stdout, re.M)
        if not m:
            raise Failure("%s: meshdata info %s printed no largest token id" % (what, full))
        top = int(m.group(1))
        if top >= vocab:
            raise BadInput("%s: %s = %s holds token ids up to %d, beyond the model's vocabulary of "
                           "%d (--set model.vocab_size=%d or more, or data encoded for this model)"
                           % (what, key, path, top, vocab, top + 1))

    # ---- ckpt-convert jobs

    def ckpt(self, args, what):
        """meshckpt ARGS --check: the job's own command line, checked now"""
        argv = shlex.split(args or "")
        r = self.run([self.exe("meshckpt", what)] + argv + ["--check"], what)
        if r.returncode != 0:
            self.refuse(r, "meshckpt", what)


def config_values(config, sets, keys, defaults):
    """The values of keys as meshtrain resolves them: its default, the INI
    file, then each --set in order"""
    vals = {k: defaults.get(k, "") for k in keys}
    if config:
        cp = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";",),
                                       strict=False)
        try:
            cp.read(config)
        except configparser.Error:
            pass  # meshtrain --check has read it already and said what is wrong
        for k in keys:
            section, name = k.split(".", 1)
            if cp.has_option(section, name):
                vals[k] = cp.get(section, name).strip().strip('"')
    for s in sets:
        k, v = parse_assignment(s, "--set")
        if k in vals:
            vals[k] = v
    return vals


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def train_hint(msg, res, lay, check):
    """For meshtrain's refusal of this job, the options of this command that
    fix it for its ranks, each one tried with meshtrain --check first
    (check(extra_sets, ranks) -> True when accepted); None when there is
    nothing to say"""
    inner = lay["tp"] * lay["pp"] * lay["cp"]
    ranks, tpn = res["ranks"], res["tasks_per_node"]
    # tensor parallelism stays inside a node (its collectives run every
    # layer), unless the job asked for a tp group across nodes itself
    tp_max = max(tpn, lay["tp"])
    m = re.search(r"train\.global_batch = (\d+) is not divisible by train\.micro_batch x "
                  r"parallel\.dp = (\d+) x (\d+)", msg)
    if m:
        gb, mb, dp = (int(x) for x in m.groups())
        fixes = []
        if gb % dp == 0:
            micro = max(d for d in divisors(gb // dp) if d <= mb)
            if check(["train.micro_batch=%d" % micro], ranks):
                fixes.append("--set train.micro_batch=%d" % micro)
        bigger = math.ceil(gb / (mb * dp)) * mb * dp
        if check(["train.global_batch=%d" % bigger], ranks):
            fixes.append("--set train.global_batch=%d" % bigger)
        # fewer data-parallel ranks: the rest in tensor parallelism, or fewer ranks
        smaller = [d for d in sorted(divisors(dp), reverse=True) if d < dp and gb % (mb * d) == 0]
        for d in smaller:
            tp = lay["tp"] * dp // d
            if tp <= tp_max and check(["parallel.dp=%d" % d, "parallel.tp=%d" % tp], ranks):
                fixes.append("--layout dp=%d,tp=%d%s" % (d, tp, "".join(
                    ",%s=%d" % (a, lay[a]) for a in ("pp", "cp") if lay[a] > 1)))
                break
        for d in smaller:
            if check(["parallel.dp=%d" % d], d * inner):
                n = d * inner
                fixes.append("--nodes %d (%d ranks)" % (n // tpn, n) if n % tpn == 0 else
                             "--nodes %d --ranks %d" % (-(-n // tpn), n))
                break
        return "%d ranks here; any of: %s" % (ranks, ", ".join(fixes)) if fixes else None
    m = re.search(r"parallel\.tp = (\d+) does not divide the attention heads model\.n_head = (\d+)", msg)
    if m:
        ok = [d for d in divisors(int(m.group(2)))
              if ranks % (d * lay["pp"] * lay["cp"]) == 0 and d <= tp_max]
        return "--layout tp=N with N one of %s (%d tasks a node)" % (", ".join(map(str, ok)), tpn)
    m = re.search(r"parallel\.pp = (\d+) does not divide model\.n_layer = (\d+)", msg)
    if m:
        ok = [d for d in divisors(int(m.group(2))) if ranks % (d * lay["tp"] * lay["cp"]) == 0]
        return "--layout pp=N with N one of %s" % ", ".join(map(str, ok))
    return None
