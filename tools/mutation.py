# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Mutation testing of the pure module_utils files (make mutation): mutmut 3, one file at a time, each against its
own unit tests (tools/mutation.toml), minus the equivalent mutants of tools/mutation_equivalent.toml.

usage: tools/mutation.py [--keep | --survivors] [--children N] [--report-only] [FILE ...]   (FILE: _drivers/versions.py, with or without .py)

Each file gets a work directory build/mutation/<package>/<file>/ holding a copy of the collection under
ansible_collections/gpuops/provision/ (mutmut 3 names a mutant after the file's path, and the trampoline in the
mutated file only switches mutants on when that name equals the module's import name, so the path must be the
import path) and a generated pyproject.toml with the [tool.mutmut] settings. mutmut writes its mutants/ folder
there; nothing in the repository is touched. --keep reuses mutants/ (mutmut then re-runs only changed functions and
mutants without a result); --survivors re-runs the last run's survivors against the current tests (after adding
tests); without either every run starts clean.

Score = killed / (mutants - equivalent); a timeout counts as killed, "no tests" and "suspicious" as survived.
Survivors (with their diffs) are written to build/mutation/<package>/<file>/survivors.txt. Exit status 1 when a file with a
target scores below it, or an equivalent-mutant entry no longer matches a surviving mutant (re-check it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "tools", "mutation.toml")
EQUIVALENT = os.path.join(ROOT, "tools", "mutation_equivalent.toml")
WORK = os.path.join(ROOT, "build", "mutation")
PREFIX = os.path.join("ansible_collections", "gpuops", "provision")
# What the unit tests need besides plugins/: their conftest and helpers, pytest.ini, and lab/pvesim (the oracle of
# the PVE property-string tests).
# Folders before files: mutmut copies a file of also_copy only into a folder that exists already.
COPY = ["plugins", "tests/helpers", "tests/unit", "tests/conftest.py", "pytest.ini", "lab/pvesim"]
KILLED = {"killed", "timeout", "caught by type check", "segfault"}


def load_config():
    with open(CONFIG, "rb") as fh:
        cfg = tomllib.load(fh)
    defaults = cfg.get("defaults", {})
    files = {}
    for name, spec in cfg["files"].items():
        files[name] = {**defaults, **spec}
    with open(EQUIVALENT, "rb") as fh:
        equivalent = tomllib.load(fh).get("mutant", [])
    for entry in equivalent:
        missing = {"file", "name", "change", "reason"} - set(entry)
        if missing or entry["file"] not in files:
            sys.exit("%s: entry %r: needs file (one of tools/mutation.toml), name, change and reason" % (EQUIVALENT, entry))
    return files, equivalent


def _ignore(_dir, names):
    return [n for n in names if n in ("__pycache__", ".hypothesis", ".pytest_cache") or n.endswith(".pyc")]


def prepare(stem, spec, keep):
    """Lay out the work directory of one file and write its mutmut configuration."""
    work = os.path.join(WORK, stem)
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    coll = os.path.join(work, PREFIX)
    copy = COPY + spec.get("also_copy", [])
    for rel in copy:
        src, dst = os.path.join(ROOT, rel), os.path.join(coll, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.isdir(src):
            # copy2 keeps mtimes: with --keep mutmut re-mutates only a file whose source is newer than its mutants.
            shutil.copytree(src, dst, dirs_exist_ok=True, ignore=_ignore)
        else:
            shutil.copy2(src, dst)
    target = "%s/plugins/module_utils/%s" % (PREFIX, spec["file"])
    # mutmut copies source_paths (every plugin, so that the tests can import filters and actions too) and
    # also_copy into mutants/, mutates only only_mutate, and runs pytest in mutants/ with the tests given here.
    toml = "\n".join([
        "[tool.mutmut]",
        "source_paths = [%s]" % json.dumps(PREFIX + "/plugins"),
        "only_mutate = [%s]" % json.dumps(target),
        "also_copy = %s" % json.dumps([PREFIX + "/" + p for p in copy if p != "plugins"]),
        "pytest_add_cli_args_test_selection = %s" % json.dumps([PREFIX + "/" + t for t in spec["tests"]]),
        "pytest_add_cli_args = %s" % json.dumps(spec.get("pytest_args", [])),
        # the change detection compares against git; the work directory is no repository.
        "use_git_change_detection = false",
        # A mutant that loops forever is killed after (test time + constant) x multiplier x 2 CPU seconds; mutmut's
        # default multiplier (15) spends minutes on each such mutant of a version comparison loop.
        "timeout_multiplier = %s" % float(spec.get("timeout_multiplier", 15)),
        "timeout_constant = %s" % float(spec.get("timeout_constant", 1)),
        "",
    ])
    with open(os.path.join(work, "pyproject.toml"), "w", encoding="utf-8") as fh:
        fh.write(toml)
    return work, target


def run_mutmut(work, spec, children, names=()):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children)] + list(names)
    log = os.path.join(work, "mutmut.log")
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        try:
            rc = subprocess.run(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=spec["timeout_s"],
                                check=False).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout after %ss" % spec["timeout_s"]
    return rc, time.monotonic() - start, log


def statuses(work, target):
    """Mutant name -> mutmut's status, from the .meta file mutmut keeps next to the mutated file."""
    from mutmut.stats import status_by_exit_code  # pylint: disable=import-outside-toplevel
    with open(os.path.join(work, "mutants", target + ".meta"), encoding="utf-8") as fh:
        meta = json.load(fh)
    module = target[:-3].replace("/", ".") + "."
    return {k[len(module):] if k.startswith(module) else k: status_by_exit_code[v] for k, v in meta["exit_code_by_key"].items()}


def diffs(work, target, names):
    """The unified diff of each mutant (mutmut's own rendering), read in the work directory."""
    if not names:
        return {}
    code = (
        "import json, sys\n"
        "from mutmut.mutation.diff_apply import get_diff_for_mutant\n"
        "module = sys.argv[1][:-3].replace('/', '.') + '.'\n"
        "print(json.dumps({n: get_diff_for_mutant(module + n, path=sys.argv[1]) for n in sys.argv[2:]}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, target] + sorted(names), cwd=work, capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


def config_name(name, files):
    """The tools/mutation.toml key that a command-line FILE names: package/file.py, with or without .py and with or
    without a leading plugins/module_utils/."""
    name = name if name.endswith(".py") else name + ".py"
    name = name.split("plugins/module_utils/", 1)[-1]
    if name not in files:
        sys.exit("%s is not in tools/mutation.toml (one of: %s)" % (name, ", ".join(files)))
    return name


def added_lines(diff):
    return "\n".join(line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="files of tools/mutation.toml (default: all)")
    parser.add_argument("--keep", action="store_true", help="reuse build/mutation/<package>/<file>/mutants (incremental)")
    parser.add_argument("--children", type=int, default=int(os.environ.get("MUTATION_CHILDREN", "1")),
                        help="mutmut --max-children (default 1, or $MUTATION_CHILDREN)")
    parser.add_argument("--report-only", action="store_true", help="only read the results of the last run")
    parser.add_argument("--survivors", action="store_true",
                        help="re-run only the last run's surviving mutants against the current tests (implies --keep)")
    args = parser.parse_args()
    files, equivalent = load_config()
    chosen = []
    for name in args.files or list(files):
        chosen.append(config_name(name, files))

    rows, failed = [], False
    for name in chosen:
        spec = dict(files[name], file=name)
        stem = name[:-3]
        if args.report_only:
            work, target, rc, wall = os.path.join(WORK, stem), "%s/plugins/module_utils/%s" % (PREFIX, name), 0, 0.0
        else:
            names = ()
            if args.survivors:
                work, target = os.path.join(WORK, stem), "%s/plugins/module_utils/%s" % (PREFIX, name)
                module = target[:-3].replace("/", ".") + "."
                names = [module + n for n, s in statuses(work, target).items() if s not in KILLED]
            work, target = prepare(stem, spec, args.keep or args.survivors)
            print(">> mutmut %s against %s%s" % (name, ", ".join(os.path.basename(t) for t in spec["tests"]),
                                                 " (%d survivors)" % len(names) if args.survivors else ""), flush=True)
            rc, wall, log = (0, 0.0, None) if args.survivors and not names else run_mutmut(work, spec, args.children, names)
            if rc != 0:
                print("   mutmut failed (%s); see %s" % (rc, os.path.relpath(log, ROOT)), flush=True)
        try:
            status = statuses(work, target)
        except FileNotFoundError:
            print("   %s: no results in %s" % (name, os.path.relpath(work, ROOT)))
            failed = True
            continue
        survivors = {n for n, s in status.items() if s not in KILLED}
        listed = {e["name"]: e for e in equivalent if e["file"] == name}
        # an entry may name a mutant the source no longer has (mutmut numbers them in order): it is stale, not an error
        text = diffs(work, target, (survivors | set(listed)) & set(status))
        excluded, stale = set(), []
        for mutant, entry in listed.items():
            if status.get(mutant) in KILLED:
                # a test kills it, so it was not equivalent after all: the entry must go
                stale.append(mutant)
            elif mutant in text and entry["change"] in added_lines(text[mutant]):
                excluded.add(mutant)
            else:
                stale.append(mutant)
        mutants = len(status) - len(excluded)
        killed = sum(1 for n, s in status.items() if s in KILLED and n not in excluded)
        survived = len(survivors - excluded)
        score = 100.0 * killed / mutants if mutants else 100.0
        not_checked = sum(1 for s in status.values() if s == "not checked")
        rows.append((name, mutants + len(excluded), killed, survived, len(excluded), score, spec["target"], wall))
        with open(os.path.join(work, "survivors.txt"), "w", encoding="utf-8") as fh:
            for mutant in sorted(survivors - excluded):
                fh.write("# %s: %s\n%s\n\n" % (mutant, status[mutant], text.get(mutant, "")))
        for mutant in stale:
            print("   %s: equivalent entry %s no longer matches a surviving mutant (source changed, or a test kills it): "
                  "re-check it" % (name, mutant))
        if not_checked:
            print("   %s: %d mutants not checked (the run stopped early)" % (name, not_checked))
        if stale or not_checked or rc != 0 or score < spec["target"]:
            failed = True

    print()
    print("%-28s %8s %7s %9s %11s %7s %7s %8s" % ("file", "mutants", "killed", "survived", "equivalent", "score",
                                                  "target", "wall s"))
    for name, mutants, killed, survived, eq, score, target, wall in rows:
        print("%-28s %8d %7d %9d %11d %6.1f%% %6s%% %8.0f"
              % (name, mutants, killed, survived, eq, score, target or "-", wall))
    print("\nsurvivors with their diffs: build/mutation/<file>/survivors.txt; equivalent mutants: "
          "tools/mutation_equivalent.toml")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
