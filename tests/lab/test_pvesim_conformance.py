"""pvesim's routes and parameter specs against the PVE API schema subset (../shared/reference/pve-api-subset.json).

The schema is not part of the repository; these tests skip when it is absent.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = os.path.join(ROOT, "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)

from pvesim import httpd, schema  # noqa: E402  pylint: disable=wrong-import-position

SCHEMA_FILE = os.environ.get("PVE_API_SUBSET", os.path.join(os.path.dirname(ROOT), "shared", "reference", "pve-api-subset.json"))
COMPARED = ("type", "pattern", "enum", "minimum", "maximum", "maxLength", "default")


@pytest.fixture(scope="module")
def ref():
    if not os.path.exists(SCHEMA_FILE):
        pytest.skip(f"{SCHEMA_FILE} not present")
    with open(SCHEMA_FILE, encoding="utf-8") as handle:
        return json.load(handle)


def _norm_pattern(pattern):
    # Perl's stringified qr// ("(?^:^...$)") and our plain form mean the same anchored regex.
    found = re.match(r"^\(\?\^:(.*)\)$", pattern or "")
    pattern = found.group(1) if found else pattern
    return pattern.removeprefix("^").removesuffix("$") if pattern else pattern


def _compare(where, ours, theirs):
    problems = []
    for field in COMPARED:
        if field == "default" and field not in ours:
            continue  # defaults are documentation; we only check the ones we state
        mine, real = ours.get(field), theirs.get(field)
        if field == "pattern":
            mine, real = _norm_pattern(mine), _norm_pattern(real)
        if mine != real:
            problems.append(f"{where}: {field} {mine!r} != {real!r}")
    if bool(ours.get("optional")) != bool(theirs.get("optional")):
        problems.append(f"{where}: optional {ours.get('optional')!r} != {theirs.get('optional')!r}")
    fmt, real_fmt = ours.get("format"), theirs.get("format")
    if isinstance(fmt, dict):
        if not isinstance(real_fmt, dict):
            problems.append(f"{where}: format is a property string here, {real_fmt!r} in PVE")
        else:
            for key, spec in fmt.items():
                if key not in real_fmt:
                    problems.append(f"{where}.{key}: not in PVE's format")
                else:
                    problems.extend(_compare(f"{where}.{key}", spec, real_fmt[key]))
    elif fmt == schema.OPAQUE:
        if real_fmt is None:
            problems.append(f"{where}: marked opaque but PVE has no format")
    elif fmt != real_fmt:
        problems.append(f"{where}: format {fmt!r} != {real_fmt!r}")
    if ours.get("type") == "array":
        problems.extend(_compare(f"{where}[]", ours["items"], theirs.get("items", {})))
    return problems


@pytest.mark.parametrize("version", ["paths", "paths_pve8"])
def test_every_simulated_route_exists_in_pve(ref, version):
    missing = [f"{m} {p}" for (p, m) in schema.PARAMS if (p, m) not in schema.EXTRA_ROUTES
               and m not in ref[version].get(p, {}).get("info", {})]
    assert not missing


def test_every_reference_route_is_simulated_or_known(ref):
    # POST /nodes/{node}/qemu (create), DELETE qemu/{vmid}, GET/DELETE tasks lists are out of scope by design.
    out_of_scope = {("/nodes/{node}/qemu", "POST"), ("/nodes/{node}/qemu/{vmid}", "DELETE"), ("/nodes/{node}/tasks", "GET"),
                    ("/nodes/{node}/tasks/{upid}", "DELETE")}
    unserved = [(p, m) for p, node in ref["paths"].items() for m in node["info"]
                if (p, m) not in schema.PARAMS and (p, m) not in out_of_scope]
    assert not unserved
    for path, method in schema.PARAMS:
        assert httpd.match_route(path.replace("{", "").replace("}", ""))[0] is not None, (method, path)


@pytest.mark.parametrize("version,params", [("paths", schema.PARAMS), ("paths_pve8", schema.PARAMS_PVE8)])
def test_parameters_match_pve_schema(ref, version, params):
    problems = []
    for (path, method), props in params.items():
        if (path, method) in schema.EXTRA_ROUTES:
            continue
        real = ref[version][path]["info"][method]["parameters"].get("properties", {})
        for name, spec in props.items():
            if name not in real:
                problems.append(f"{method} {path}: parameter {name} not in PVE")
                continue
            problems.extend(_compare(f"{method} {path} {name}", spec, real[name]))
        # PVE's required parameters must all be known to us
        for name, spec in real.items():
            if not spec.get("optional") and name not in props:
                problems.append(f"{method} {path}: required PVE parameter {name} missing")
    assert not problems, "\n".join(problems)


def test_hostpci_format_matches_qemu_server(ref):
    real = ref["formats"]["pve-qm-hostpci"]
    assert set(schema.HOSTPCI_FMT) == {k for k in real if isinstance(real[k], dict)}
    problems = []
    for key, spec in schema.HOSTPCI_FMT.items():
        problems.extend(_compare(f"hostpci.{key}", spec, real[key]))
        assert bool(spec.get("default_key")) == bool(real[key].get("default_key")), key
    assert not problems, "\n".join(problems)
    assert ref["_meta"]["formats"]["pve-qm-hostpci"]["max_index"].endswith("$MAX_HOSTPCI_DEVICES = 16)") and schema.MAX_HOSTPCI == 16


def test_pve8_differs_only_by_driver(ref):
    # PVE 8.4 has no hostpci 'driver'; our format models PVE 9. Everything else we serve exists in 8.4 too.
    pve8 = ref["paths_pve8"]["/nodes/{node}/qemu/{vmid}/config"]["info"]["PUT"]["parameters"]["properties"]
    pve9 = ref["paths"]["/nodes/{node}/qemu/{vmid}/config"]["info"]["PUT"]["parameters"]["properties"]
    assert "driver" not in pve8["hostpci[n]"]["typetext"] and "driver" in pve9["hostpci[n]"]["typetext"]
    ours = schema.PARAMS[("/nodes/{node}/qemu/{vmid}/config", "PUT")]
    assert [n for n in ours if n not in pve8] == []


def test_expanded_indexed_names_use_pve_maxima():
    put = schema.EXPANDED[("/nodes/{node}/qemu/{vmid}/config", "PUT")]
    assert "hostpci15" in put and "hostpci16" not in put and "hostpci[n]" not in put
    assert "net31" in put and "net32" not in put


def test_returned_fields_are_declared(ref):
    """Fields pvesim returns for pci scan / status / pending / tasks are in PVE's return schema (plus the known extras)."""
    sys.path.insert(0, LAB)
    from pvesim.state import Sim  # pylint: disable=import-outside-toplevel
    sim = Sim(os.path.join(LAB, "pvesim", "fixtures", "lab.json"))
    paths = ref["paths"]
    pci_fields = set(paths["/nodes/{node}/hardware/pci"]["info"]["GET"]["returns"]["items"]["properties"])
    undocumented = {"nvidia", "physfn", "virtfns"}  # SysFSTools::lspci extras (reference/proxmox.md 2a)
    for dev in sim.pci_scan("pve1", ""):
        assert set(dev) <= pci_fields | undocumented, dev
    status_fields = set(paths["/nodes/{node}/qemu/{vmid}/status/current"]["info"]["GET"]["returns"]["properties"])
    assert set(sim.vm_status("pve1", 100)) <= status_fields
    list_fields = set(paths["/nodes/{node}/qemu"]["info"]["GET"]["returns"]["items"]["properties"])
    assert all(set(vm) <= list_fields for vm in sim.vm_list("pve1"))
    pending_fields = set(paths["/nodes/{node}/qemu/{vmid}/pending"]["info"]["GET"]["returns"]["items"]["properties"])
    assert all(set(item) <= pending_fields for item in sim.vm_pending("pve1", 100))
    upid = sim.vm_power("pve2", 200, "start", "root@pam")
    task_fields = set(paths["/nodes/{node}/tasks/{upid}/status"]["info"]["GET"]["returns"]["properties"])
    assert set(sim.task_status("pve2", upid)) <= task_fields
    mdev_fields = set(paths["/nodes/{node}/hardware/pci/{pci-id-or-mapping}/mdev"]["info"]["GET"]["returns"]["items"]["properties"])
    assert all(set(t) <= mdev_fields for t in sim.mdev_scan("pve2", "0000:21:00.0") + sim.mdev_scan("pve1", "0000:02:00.5"))
    version_fields = set(paths["/version"]["info"]["GET"]["returns"]["properties"])
    assert set(sim.version) <= version_fields
