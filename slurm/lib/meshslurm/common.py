"""What every part of meshslurm shares: the source tree, exit codes, the
three kinds of error (each one line, its own exit code), and the small
parsers of walltimes, lists, KEY=VALUE pairs and layouts."""
import configparser
import os
import re
import shlex
import stat

PROG = "meshslurm"
# the source tree: this file is SRC/slurm/lib/meshslurm/common.py
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXIT_BADINPUT, EXIT_RUNTIME, EXIT_UNAVAILABLE = 2, 3, 77
EXIT_REQUEUE = 75    # the application's "checkpoint written (SIGUSR1), please requeue" code
EXIT_CANCELLED = 76  # its "checkpoint written (SIGTERM: scancel), stopped for good" code
JOBS = ("train", "bench", "ckpt-convert")


class BadInput(Exception):
    """A user error: one line naming the bad input, exit code 2."""


class Failure(Exception):
    """Something here does not work (a tool missing, a daemon that does not
    start): one line, exit code 3."""


class Unavailable(Exception):
    """What was asked cannot run on this machine (no Slurm, not root): one
    line, exit code 77, what test harnesses read as "skipped"."""


# ---------------------------------------------------------------------------
# small parsers

def parse_walltime(text):
    """Slurm time formats -> seconds: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    t = str(text).strip()
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", t)
    if not m:
        raise BadInput("time '%s' is not a Slurm time (HH:MM:SS, D-HH:MM:SS or minutes)" % text)
    days, a, b, c = m.groups()
    a, b, c = int(a), int(b or 0), int(c or 0)
    if days is not None:  # D-H[:M[:S]]
        return ((int(days) * 24 + a) * 60 + b) * 60 + c
    if m.group(4) is not None:  # H:M:S
        return (a * 60 + b) * 60 + c
    if m.group(3) is not None:  # M:S
        return a * 60 + b
    return a * 60  # minutes


def format_walltime(seconds):
    """HH:MM:SS up to a day (24:00:00 included), D-HH:MM:SS beyond"""
    if int(seconds) <= 86400:
        h, s = divmod(int(seconds), 3600)
        return "%02d:%02d:%02d" % (h, s // 60, s % 60)
    d, s = divmod(int(seconds), 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return ("%d-%02d:%02d:%02d" % (d, h, m, s)) if d else "%02d:%02d:%02d" % (h, m, s)


def read_ini(path, section, inline_comments):
    """The INI file at path (keys keep their case; no interpolation;
    inline_comments: the prefixes that begin a comment after a value, or
    None), which must have [section]; a file configparser refuses, or one
    without the section, is bad input naming the file."""
    cp = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=inline_comments)
    cp.optionxform = str
    try:
        cp.read(path)
    except configparser.Error as e:
        raise BadInput("%s: %s" % (path, str(e).splitlines()[0]))
    if not cp.has_section(section):
        raise BadInput("%s: no [%s] section" % (path, section))
    return cp


def parse_int_list(text, what):
    try:
        vals = [int(x) for x in re.split(r"[,\s]+", str(text).strip()) if x]
    except ValueError:
        raise BadInput("%s: expected a list of positive integers, got '%s'" % (what, text))
    if not vals or any(v <= 0 for v in vals):
        raise BadInput("%s: expected a list of positive integers, got '%s'" % (what, text))
    return vals


def parse_bool(text, what):
    t = str(text).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off", ""):
        return False
    raise BadInput("%s: expected true or false, got '%s'" % (what, text))


def parse_assignment(text, what):
    if "=" not in text:
        raise BadInput("%s: expected KEY=VALUE, got '%s'" % (what, text))
    k, v = text.split("=", 1)
    k = k.strip()
    if not k:
        raise BadInput("%s: empty key in '%s'" % (what, text))
    return k, v.strip()


# layout keys beyond the mesh axes (meshplan's sweeps): key -> (meshtrain key, kind)
LAYOUT_SETTINGS = {
    "zero": ("parallel.zero", "int"), "mb": ("train.micro_batch", "int"),
    "sp": ("parallel.sp", "bool"), "recompute": ("train.recompute", "bool"),
    "schedule": ("parallel.schedule", "word"), "v": ("parallel.virtual_stages", "int"),
    "ep": ("parallel.ep", "int"), "cp_mode": ("parallel.cp_mode", "word"),
    "pp_first": ("parallel.pp_first_layers", "int"), "pp_last": ("parallel.pp_last_layers", "int"),
    "slices": ("parallel.pp_token_slices", "int"),
}


# the layout of every rank data-parallel (tp = pp = cp = 1); `auto` is the
# planner's word alone (parallel.layout = auto), never this one
DP_ONLY = "dp-only"


def planner_requested(sets):
    """True when the --set list asks meshtrain to plan its layout at start"""
    val = ""
    for s in sets:
        k, v = parse_assignment(s, "--set")
        if k == "parallel.layout":
            val = v
    return val == "auto"


def parse_layout(text, ranks, where="--layout"):
    """'dp-only' or 'tp=2,pp=2[,cp=1][,dp=N][,zero=1,mb=4,sp=1,recompute=0,schedule=1f1b,v=1,ep=1]'
    -> dict(dp,tp,pp,cp, settings=[meshtrain --set ...]) for `ranks` ranks."""
    lay = {"dp": 0, "tp": 1, "pp": 1, "cp": 1}
    settings = []
    t = str(text).strip()
    if t == "auto":
        raise BadInput("%s 'auto': every rank data-parallel is spelled %s; auto is the planner's "
                       "word: set parallel.layout=auto (--set, or [set] in a sweep) to let meshtrain "
                       "plan the layout" % (where, DP_ONLY))
    if t not in ("", DP_ONLY):
        for part in re.split(r"[,\s]+", t):
            if not part:
                continue
            k, v = parse_assignment(part, "layout '%s'" % text)
            if k in LAYOUT_SETTINGS:
                key, kind = LAYOUT_SETTINGS[k]
                if kind == "int" and not re.fullmatch(r"\d+", v):
                    raise BadInput("layout '%s': %s must be an integer" % (text, k))
                if kind == "bool":
                    if v not in ("0", "1", "true", "false"):
                        raise BadInput("layout '%s': %s must be 0 or 1" % (text, k))
                    v = "true" if v in ("1", "true") else "false"
                if kind == "word" and not re.fullmatch(r"[a-z0-9-]+", v):
                    raise BadInput("layout '%s': %s = '%s' is not a name" % (text, k, v))
                settings.append((k, key, v))
                continue
            if k not in lay:
                raise BadInput("layout '%s': unknown key '%s' (dp, tp, pp, cp, %s)"
                               % (text, k, ", ".join(LAYOUT_SETTINGS)))
            if not re.fullmatch(r"\d+", v) or int(v) <= 0:
                raise BadInput("layout '%s': %s must be a positive integer" % (text, k))
            lay[k] = int(v)
    inner = lay["tp"] * lay["pp"] * lay["cp"]
    if ranks % inner:
        raise BadInput("layout '%s': tp*pp*cp = %d does not divide %d ranks (ranks a multiple of %d "
                       "with --ranks or --nodes, or a %s whose tp*pp*cp divides %d)"
                       % (text, inner, ranks, inner, where, ranks))
    if lay["dp"] == 0:
        lay["dp"] = ranks // inner
    if lay["dp"] * inner != ranks:
        raise BadInput("layout '%s': dp*tp*pp*cp = %d but the job has %d ranks (%s dp=%d, or "
                       "--ranks %d)" % (text, lay["dp"] * inner, ranks, where, ranks // inner,
                                        lay["dp"] * inner))
    lay["settings"] = settings
    return lay


def job_layout(text, ranks, sets, where="--layout"):
    """The layout of a train job: text (None: not given; dp-only then) for
    `ranks` ranks, or, where the --set list holds parallel.layout=auto, the
    planner's (planned: filled in by the checks, which read meshtrain
    --check's choice)."""
    if planner_requested(sets):
        if text is not None and text.strip() not in ("", DP_ONLY):
            raise BadInput("%s '%s' and parallel.layout=auto: give one (the planner chooses the "
                           "layout when parallel.layout=auto)" % (where, text))
        return {"dp": 0, "tp": 1, "pp": 1, "cp": 1, "settings": [], "planner": True, "planned": None}
    return parse_layout(DP_ONLY if text is None else text, ranks, where)


def layout_name(lay):
    if lay.get("planner"):  # parallel.layout = auto: what meshtrain --check planned, if asked
        return "auto:" + layout_name(lay["planned"]) if lay.get("planned") else "auto"
    name = "dp%d-tp%d-pp%d-cp%d" % (lay["dp"], lay["tp"], lay["pp"], lay["cp"])
    for k, _, v in lay.get("settings", []):
        name += "-%s%s" % (k, {"true": "1", "false": "0"}.get(v, v))
    return name




def q(x):
    """x quoted for bash"""
    return shlex.quote(str(x))


def absdir(path):
    return os.path.abspath(os.path.expanduser(path))


def write_executable(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
