"""NVIDIA's own parser as the judge of ours: every mig-parted v1 document in the repository (YAML files, Markdown
code blocks, docs strings of plugins and literal dicts in Python tests) is checked by `nvidia-mig-parted assert
--valid-config` (github.com/NVIDIA/mig-parted cmd/nvidia-mig-parted/assert/assert.go `assertWrapper`: parse the file
into v1.Spec, whose UnmarshalJSON validates every config, select one, stop before NVML) and by
plugins/module_utils/_mig/geometry.py `parse_config` for every config name. Both must agree on valid/invalid for each."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "plugins", "module_utils", "_mig"))
sys.path.insert(0, os.path.join(REPO, "lab"))
import geometry  # noqa: E402  pylint: disable=import-error,wrong-import-position
import gobuild  # noqa: E402  pylint: disable=import-error,wrong-import-position

SKIP_DIRS = {".git", ".venv", "build", ".ansible", "run", "node_modules", "tests/output", "__pycache__"}
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
HEREDOC = re.compile(r"<<-?'?(\w+)'?\n(.*?)\n\1\b", re.S)


def _walk(node, found):
    if isinstance(node, dict):
        if "mig-configs" in node:
            found.append(node)
            return
        for v in node.values():
            _walk(v, found)
    elif isinstance(node, list):
        for v in node:
            _walk(v, found)


def _yaml_docs(text):
    out = []
    try:
        for doc in yaml.safe_load_all(text):
            _walk(doc, out)
    except yaml.YAMLError:
        pass
    return out


def _document_builders(tree):
    """Helpers such as `def doc(configs): return {"version": "v1", "mig-configs": configs}` -> {name: version}."""
    out = {}
    for fn in ast.walk(tree):
        if not (isinstance(fn, ast.FunctionDef) and len(fn.args.args) == 1 and len(fn.body) == 1
                and isinstance(fn.body[0], ast.Return) and isinstance(fn.body[0].value, ast.Dict)):
            continue
        body = fn.body[0].value
        keys = [k.value if isinstance(k, ast.Constant) else None for k in body.keys]
        values = dict(zip(keys, body.values))
        if set(keys) == {"version", "mig-configs"} and isinstance(values["version"], ast.Constant) \
                and isinstance(values["mig-configs"], ast.Name) and values["mig-configs"].id == fn.args.args[0].arg:
            out[fn.name] = values["version"].value
    return out


def _python_docs(text):
    out = []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return out
    builders = _document_builders(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in builders and node.args:
            try:
                out.append({"version": builders[node.func.id], "mig-configs": ast.literal_eval(node.args[0])})
            except ValueError:
                pass
        if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "mig-configs" for k in node.keys):
            try:
                out.append(ast.literal_eval(node))
            except ValueError:
                pass  # built from variables: not a document as written
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "mig-configs" in node.value:
            out.extend(_yaml_docs(node.value))
    return out


def collect():
    """[(where, document)] for every literal mig-parted document in the tracked tree, deduplicated."""
    seen, docs = set(), []
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    for rel in sorted(files):
        if any(part in SKIP_DIRS for part in rel.split("/")) or not os.path.isfile(os.path.join(REPO, rel)):
            continue
        ext = os.path.splitext(rel)[1]
        if ext not in (".yml", ".yaml", ".md", ".py", ".j2"):
            continue
        with open(os.path.join(REPO, rel), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        if "mig-configs" not in text:
            continue
        if ext in (".yml", ".yaml"):
            found = _yaml_docs(text)
        elif ext == ".md":
            blocks = FENCE.findall(text)
            blocks += [body for block in blocks for _tag, body in HEREDOC.findall(block)]
            found = [d for block in blocks for d in _yaml_docs(block)]
        elif ext == ".py":
            found = _python_docs(text)
        else:
            found = []
        for doc in found:
            text_key = yaml.safe_dump(doc, sort_keys=True)
            if "{{" in text_key or text_key in seen:  # Jinja is rendered before any parser sees it
                continue
            seen.add(text_key)
            docs.append((rel, doc))
    return docs


def ours(doc):
    configs = doc.get("mig-configs") if isinstance(doc, dict) else None
    names = list(configs) if isinstance(configs, dict) and configs else [None]
    try:
        for name in names:
            geometry.parse_config(doc, name)
    except geometry.MigError as exc:
        return False, str(exc)
    return True, ""


def theirs(binary, doc, path):
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    cmd = [binary, "assert", "--valid-config", "-f", path]
    configs = doc.get("mig-configs") if isinstance(doc, dict) else None
    if isinstance(configs, dict) and configs:
        cmd += ["-c", str(next(iter(configs)))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


@pytest.fixture(scope="module")
def mig_parted():
    return os.path.join(gobuild.builder("mig-parted").ensure(), "bin", "nvidia-mig-parted")


def test_collector_finds_the_documents():
    docs = collect()
    places = {rel for rel, _doc in docs}
    assert len(docs) >= 20, places
    assert any(p.startswith("docs/") for p in places) and any(p.startswith("tests/") for p in places)
    assert any(not ours(d)[0] for _rel, d in docs), "no invalid document found: the agreement would prove little"


def test_our_parser_agrees_with_nvidia_mig_parted(mig_parted, tmp_path):
    docs = collect()
    disagreements = []
    for i, (rel, doc) in enumerate(docs):
        our_ok, our_msg = ours(doc)
        their_ok, their_msg = theirs(mig_parted, doc, str(tmp_path / f"doc{i}.yaml"))
        if our_ok != their_ok:
            disagreements.append(f"{rel}: ours {'valid' if our_ok else 'invalid'} ({our_msg}), mig-parted "
                                 f"{'valid' if their_ok else 'invalid'} ({their_msg})\n{yaml.safe_dump(doc)}")
    valid = sum(1 for _rel, d in docs if ours(d)[0])
    print(f"mig-parted oracle: {len(docs) - len(disagreements)}/{len(docs)} documents agree "
          f"({valid} valid, {len(docs) - valid} invalid by ours)")
    assert not disagreements, "\n\n".join(disagreements)
