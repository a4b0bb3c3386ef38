"""What is checked before a job is written, so that a job that would fail
at start is refused now and not after the queue wait: a train job's
configuration (meshtrain --check for its rank count), ...."""
import os
import subprocess

from .common import EXIT_BADINPUT, BadInput, Failure


def check_train_config(bin_dir, workdir, config, sets, ranks, what):
    """Runs `meshtrain --check CONFIG --set ... --ranks N` in the job's working
    directory: the checks meshtrain makes at start (every key and value, the
    model shape, mesh, batch and pipeline for N ranks), made now rather than
    after the queue wait. Refuses the job with meshtrain's own message."""
    exe = os.path.join(bin_dir, "meshtrain")
    if not os.access(exe, os.X_OK):
        raise BadInput("%s: cannot check the configuration: no %s (build first: bash "
                       "apps/scripts/setup.sh; or --bin DIR; --no-check skips the check)" % (what, exe))
    argv = [exe, "--check"] + ([config] if config else [])
    for s in sets:
        argv += ["--set", s]
    argv += ["--ranks", str(ranks)]
    try:
        r = subprocess.run(argv, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise Failure("%s: cannot run %s --check: %s (--no-check skips the check)" % (what, exe, e))
    if r.returncode == 0:
        return
    lines = r.stderr.strip().splitlines()
    errors = [l for l in lines if l.startswith("meshtrain: error: ")]
    if r.returncode == EXIT_BADINPUT and errors:
        raise BadInput("%s: %s" % (what, errors[0]))
    raise Failure("%s: %s --check exited with %d%s (is the build's environment loaded? --no-check "
                  "skips the check)" % (what, exe, r.returncode, ": " + lines[-1] if lines else ""))
