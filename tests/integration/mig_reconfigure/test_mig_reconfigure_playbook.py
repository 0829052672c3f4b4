# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/mig_reconfigure.yml end to end: ansible-playbook over simulated nodes (local hosts, one gpusim state
each) against the Kubernetes stand-in, whose device plugin advertises what gpusim holds. Asserts on the stand-in's
request log (cordon/uncordon PATCHes, evictions), node labels/unschedulable/allocatable and the gpusim state files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mig_reconfigure_lab import (  # noqa: E402  pylint: disable=import-error,wrong-import-position
    A100, BALANCED_A100, BALANCED_H100, CONFIG, GPUSIM, H100_3G_X2, H100_BALANCED, ROOT, Fleet, failures, gpu)
from requestlog import mig_allocatable, unschedulable  # noqa: E402  pylint: disable=import-error,wrong-import-position
import seed as kube_seed  # noqa: E402  pylint: disable=import-error,wrong-import-position
from gpusim_nvml import library_env  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = pytest.mark.slow

STATE = "nvidia.com/mig.config.state"
HOSTLOCK = os.path.join(ROOT, "plugins", "module_utils", "_mig", "host_lock.py")

# A TTL short enough that the three-node roll must renew its lock (the role renews after a third of it). 20 s, not 10:
# the first gap, from the take to the renewer's first renewal, spans two tasks and the renewer's start (which imports
# the kubernetes client), and on a loaded machine it was 10.6 s, past a 10 s TTL's bound of 6.7 s (the same gap as
# in test_the_lock_is_renewed_beside_a_node_that_takes_longer_than_its_ttl, which has 20 s too).
LOCK_TTL = 20

# The boot-time re-apply off, for the tests whose subject is elsewhere (the roll's and the per-host lock, the drain,
# the budget): installing it costs each node about eight module runs (6.2 s a node here, measured with a task timer
# in test_roll_three_nodes_skips_the_matching_node; 13.6 s while its nine module_utils files were copied one by one).
# test_roll_three_nodes_skips_the_matching_node (install on changed and skipped nodes, the applier after a reboot,
# the idempotent re-run), test_check_mode_changes_nothing_anywhere and
# test_within_the_failure_budget_the_roll_goes_on_and_the_run_still_fails (declared before the change, put back by the
# rollback) keep it on, as do the other tests that fail a node after its apply.
NO_BOOT = {"mig_reconfigure_boot_apply": False}


def device_plugin_pod(lab, node):
    running = [p.metadata.name for p in lab.running_pods("gpu-operator", node)
               if p.metadata.name.startswith("nvidia-device-plugin-daemonset-")]
    return running[0] if running else None


def pod_deletes(lab, prefix, node):
    """DELETEs of the gpu-operator pods named ``prefix``* that were on ``node`` (the DaemonSet controller names them)."""
    return lab.count("DELETE", predicate=lambda r: r["resource"] == "pods" and r["namespace"] == "gpu-operator"
                     and (r["name"] or "").startswith(prefix) and r.get("node") == node and not r["subresource"])


def lock_holder(path, kind=None):
    """Who holds the per-host MIG lock at ``path`` (the lock CLI's show: reads, never takes it), or None; ``kind``
    'lease' or 'run' counts only that kind of hold (the plan's check-mode runs hold it as runs, under the roll's
    holder name too; the node's turn keeps it as a lease)."""
    out = subprocess.run([sys.executable, HOSTLOCK, "show", "--path", path], capture_output=True, text=True, check=True)
    held = json.loads(out.stdout)["held_by"] or {}
    return held.get("holder") if kind is None or held.get("kind") == kind else None


def roll_lease(fleet, name="gpuops-mig-reconfigure"):
    """The roll's lock (a Lease in kube-system), or None."""
    try:
        return fleet.lab.get_json("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/" + name)
    except Exception as e:  # pylint: disable=broad-except
        if getattr(e, "status", None) == 404 or "404" in str(e):
            return None
        raise


def lease_writes(lab, name="gpuops-mig-reconfigure"):
    """The product's writes of the roll's Lease, in order: (t, method, holder, slots, renewTime)."""
    out = []
    for r in lab.requests():
        if r["resource"] == "leases" and r["name"] in (name, None) and r["method"] in ("POST", "PUT") \
                and r["status"] in (200, 201):
            body = r.get("body") or {}
            if (body.get("metadata") or {}).get("name") != name:
                continue
            notes = (body.get("metadata") or {}).get("annotations") or {}
            out.append((r["t"], r["method"], (body.get("spec") or {}).get("holderIdentity") or "",
                        [n for n in (notes.get("gpuops.provision/roll-slots") or "").split(",") if n],
                        (body.get("spec") or {}).get("renewTime")))
    return out


def roll_annotations(node):
    return {k: v for k, v in (node["metadata"].get("annotations") or {}).items() if k.startswith("gpuops.provision/")}


def three_nodes(node2=None, node3=None):
    return {"node-1": {"gpus": [gpu(instances=H100_BALANCED)]},          # already at all-balanced
            "node-2": node2 or {"gpus": [gpu(instances=H100_3G_X2)]},
            "node-3": node3 or {"gpus": [gpu(instances=H100_3G_X2)]}}


def counts(state, index=0):
    """Profile ids of the GPU instances in a gpusim state (order-free)."""
    return sorted(g["profile_id"] for g in state["gpus"][index].get("gpu_instances", []))


def recording_nvidia_ctk(base):
    """A stand-in nvidia-ctk that appends its arguments, and the node whose GPUs it runs for, to a log."""
    path = os.path.join(str(base), "bin", "nvidia-ctk")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('#!/bin/sh\necho "$(basename "$GPUSIM_STATE" .gpusim.json) $*" >> "%s.log"\n' % path)
    os.chmod(path, 0o755)
    return path


@pytest.mark.long
def test_roll_three_nodes_skips_the_matching_node(tmp_path):
    ctk = recording_nvidia_ctk(tmp_path)
    fleet = Fleet(tmp_path, three_nodes(node3={"gpus": [gpu(A100, "disabled")]}),  # A100: mode change needs a GPU reset
                  group_vars={"mig_reconfigure_nvidia_ctk": ctk})
    # What an earlier version of the role left on node-2: the collection code copied file by file.
    old_copy = os.path.join(str(tmp_path), "boot", "node-2", "lib", "ansible_collections", "gpuops", "provision",
                            "plugins", "module_utils")
    os.makedirs(old_copy)
    with open(os.path.join(old_copy, "_mig_apply.py"), "w", encoding="utf-8") as fh:
        fh.write("raise ImportError('the old copy')\n")
    with fleet.start() as lab:
        node1_before = fleet.raw("node-1")
        plugins_before = {name: device_plugin_pod(lab, name) for name in ("node-1", "node-2", "node-3")}
        rc, out = fleet.run(extra_vars={"mig_reconfigure_roll_lock_ttl": LOCK_TTL})
        assert rc == 0, failures(out)

        # node-1 was already at its target: never cordoned, never drained, never labelled, GPU untouched.
        assert fleet.node_patches("node-1") == []
        assert lab.evictions(node="node-1") == []
        assert fleet.raw("node-1") == node1_before

        for name, expected in (("node-2", BALANCED_H100), ("node-3", BALANCED_A100)):
            node = fleet.node(name)
            assert lab.cordons(name) == 1 and lab.cordons(name, value=False) == 1
            assert not node["spec"].get("unschedulable")
            labels = node["metadata"]["labels"]
            assert labels[STATE] == "success" and labels["nvidia.com/mig.config"] == "all-balanced"
            # Operand paused during the change and restored; the one that was "false" left alone.
            assert labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
            assert labels["nvidia.com/gpu.deploy.dcgm-exporter"] == "false"
            assert any((r.get("body") or {}).get("metadata", {}).get("labels", {}).get("nvidia.com/gpu.deploy.device-plugin")
                       == "paused-for-mig-change" for r in fleet.node_patches(name))
            assert mig_allocatable(node) == {"nvidia.com/mig-" + k: v for k, v in expected.items()}
            # Four PATCHes of the node, each recording the phase reached on the node itself (so that a run killed
            # anywhere is finished by the next): pending + pause + cordon + the roll state (node_roll); phase drained;
            # the operands restored + phase applied; then the state, the uncordon and phase released together, once
            # the device plugin advertised the new devices (node_release).
            patches = fleet.node_patches(name)
            assert [unschedulable(r) for r in patches] == [True, None, None, False], patches
            phases = [r["body"]["metadata"]["annotations"]["gpuops.provision/roll-phase"] for r in patches]
            assert phases == ["cordoned", "drained", "applied", "released"], phases
            first = patches[0]["body"]["metadata"]["annotations"]
            assert first["gpuops.provision/roll"] == "mig_reconfigure" and first["gpuops.provision/roll-target"] == "all-balanced"
            assert first["gpuops.provision/cordoned-by"] == "gpuops.provision mig_reconfigure"
            assert json.loads(first["gpuops.provision/roll-initial"]) == {"unschedulable": False}
            assert patches[0]["body"]["metadata"]["resourceVersion"], "the cordon must carry the version it read"
            restored = patches[2]["body"]["metadata"]["labels"]
            assert set(restored.values()) == {"true"}, restored
            assert restored["nvidia.com/gpu.deploy.device-plugin"] == "true" and "nvidia.com/gpu.deploy.dcgm-exporter" not in restored
            # The nodes carry nvidia.com/mig.config=all-balanced already (the selection): only the state is written.
            assert patches[3]["body"]["metadata"]["labels"] == {STATE: "success"}
            assert roll_annotations(node) == {"gpuops.provision/roll": "mig_reconfigure",
                                              "gpuops.provision/roll-target": "all-balanced",
                                              "gpuops.provision/roll-phase": "released"}
            # The app pod is evicted (the DaemonSet pod stays). The ReplicaSet's replacement for node-2's pod may be
            # scheduled on node-3 and evicted again there; with the PDB at maxUnavailable 1 an eviction can get the
            # disruption controller's 429 until the previous replacement is Ready, and the role retries it.
            outcomes = [e["outcome"] for e in lab.evictions(node=name)]
            assert "Evicted" in outcomes and set(outcomes) <= {"Evicted", "TooManyRequests"}, outcomes
            # The paused label makes the DaemonSet controller remove the plugin pod (the role deletes what is left of
            # it); restoring the label brings a new one, which reads the new MIG devices.
            assert pod_deletes(lab, "nvidia-device-plugin-daemonset-", name) <= 1
            assert device_plugin_pod(lab, name) not in (None, plugins_before[name])
            assert not os.path.exists(os.path.join(str(tmp_path), name + ".lock")), "lock not released"
        assert fleet.state("node-3")["gpus"][0]["mig_mode"] in (1, "enabled", True)
        assert device_plugin_pod(lab, "node-1") == plugins_before["node-1"]  # the matching node's plugin kept running
        assert len(lab.running_pods("ml")) == 3  # the application kept its replicas through the roll

        # max_parallel 1: node-2 uncordoned before node-3 was cordoned; timeline from the stand-in's request log.
        t2, t3 = fleet.timeline("node-2"), fleet.timeline("node-3")
        assert t2[1] < t3[0] or t3[1] < t2[0]
        # The roll's lock: taken before the first cordon (listing every targeted node), each node's slot written
        # into it before its cordon and given back after its uncordon, never two slots at once, renewed beside the
        # roll at least every third of its TTL, released after the last uncordon.
        lease = lease_writes(lab)
        assert lease[0][1] == "POST" and lease[0][2].startswith("gpuops.provision.mig_reconfigure ")
        holder = lease[0][2]
        assert all(w[2] == holder for w in lease[:-1]) and lease[-1][2] == "" and lease[-1][0] > max(t2[1], t3[1])
        assert lease[0][0] < min(t2[0], t3[0])
        assert max(len(w[3]) for w in lease) == 1, [w[3] for w in lease]
        for name, (cordon, uncordon) in (("node-2", t2), ("node-3", t3)):
            taken = min(w[0] for w in lease if name in w[3])
            given_back = min(w[0] for w in lease if w[0] > taken and name not in w[3])
            assert taken < cordon and uncordon < given_back, (name, taken, cordon, uncordon, given_back)
        renewals = [w[0] for w in lease if w[2] == holder]
        gaps = [b - a for a, b in zip(renewals, renewals[1:])]
        assert renewals[-1] - renewals[0] > LOCK_TTL and max(gaps) < LOCK_TTL * 2 / 3.0, gaps
        created = [r for r in lab.requests() if r["resource"] == "leases" and r["method"] == "POST"][0]
        assert created["body"]["metadata"]["annotations"]["gpuops.io/roll-nodes"] == "node-1,node-2,node-3"
        assert created["body"]["spec"]["leaseDurationSeconds"] == LOCK_TTL
        stats = out["global_custom_stats"]["mig_reconfigure"]["nodes"]
        assert stats["node-1"]["result"] == "skipped" and stats["node-1"]["drained"] is False
        assert stats["node-2"]["result"] == stats["node-3"]["result"] == "success"
        print("\ntimeline (cordon -> uncordon, s): node-1 never cordoned; node-2 %.1f; node-3 %.1f (role: %s / %s)"
              % (t2[1] - t2[0], t3[1] - t3[0], stats["node-2"]["cordoned_seconds"], stats["node-3"]["cordoned_seconds"]))

        # Every node at its target got the boot-time re-apply (skipped node-1 too); a simulated reboot of node-2
        # loses its instances, and the installed applier, run as the unit would run it, brings them back.
        for name in ("node-1", "node-2", "node-3"):
            unit = open(os.path.join(str(tmp_path), "boot", name, "gpuops-mig-apply.service"), encoding="utf-8").read()
            assert "Before=kubelet.service nvidia-cdi-refresh.service" in unit and "Type=oneshot" in unit
            assert 'Environment="GPUSIM_STATE=%s"' % fleet.states[name] in unit
        # After each change, the MIG device nodes and the management CDI specification (reconfigure.go handleCDI);
        # node-1 was not changed.
        calls = open(ctk + ".log", encoding="utf-8").read().splitlines()
        for name in ("node-2", "node-3"):
            assert [c for c in calls if c.startswith(name + " ") and "--version" not in c] == [
                name + " system create-device-nodes --control-devices",
                name + " cdi generate --mode=management --output=/var/run/cdi/management.nvidia.com-gpu.yaml"], calls
        assert not [c for c in calls if c.startswith("node-1 ")]
        boot = os.path.join(str(tmp_path), "boot", "node-2")
        assert sorted(os.listdir(os.path.join(boot, "lib"))) == ["gpuops_mig_apply.py", "gpuops_mig_apply.sources.json"]
        subprocess.run([sys.executable, "-m", "gpusim", "reboot"], check=True,
                       env=dict(os.environ, PYTHONPATH=GPUSIM, GPUSIM_STATE=fleet.states["node-2"]))
        env = dict(os.environ, **library_env(fleet.states["node-2"]))
        assert fleet.state("node-2")["gpus"][0]["gpu_instances"] == []
        applier = [sys.executable, os.path.join(boot, "lib", "gpuops_mig_apply.py"), os.path.join(boot, "mig-config.json")]
        done = subprocess.run(applier, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert "GPU 0 (NVIDIA H100 80GB HBM3): changed" in done.stdout
        assert counts(fleet.state("node-2")) == [9, 14, 19, 19]
        again = subprocess.run(applier, env=env, capture_output=True, text=True, check=False)
        assert again.returncode == 0 and "unchanged" in again.stdout

        # A second run finds every node at its target: plan only, no write to the cluster.
        writes = len(fleet.writes())
        rc, out = fleet.run()
        assert rc == 0, failures(out)
        assert len(fleet.writes()) == writes
        assert all(v["result"] == "skipped" for v in out["global_custom_stats"]["mig_reconfigure"]["nodes"].values())


def test_pdb_refusals_are_retried_every_5_s_until_the_drain_timeout_then_clean_failure(tmp_path):
    db = {"metadata": {"name": "db-0-a", "namespace": "ml", "labels": {"app": "db"},
                       "ownerReferences": [{"kind": "ReplicaSet", "name": "db-0"}]}, "spec": {"nodeName": "node-2"}}
    pdb = {"metadata": {"name": "db", "namespace": "ml"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}
    fleet = Fleet(tmp_path, three_nodes(), extra_pods=[db], pdbs=[pdb], group_vars=dict(NO_BOOT, mig_reconfigure_drain_timeout=22))
    with fleet.start() as lab:
        before = {n: fleet.raw(n) for n in fleet.nodes}
        rc, out = fleet.run()
        assert rc != 0
        msg = " ".join(failures(out)["node-2"])
        assert "drain did not finish within 22 s: pods still on the node: ml/db-0-a" in msg, msg
        assert "ml/db-0-a: eviction refused (429 Too Many Requests: Cannot evict pod as it would violate the pod's disruption budget." in msg, msg
        assert "No GPU was touched" in msg
        # kubectl drain's rule (pkg/drain/drain.go evictPods): a refused eviction is tried again every 5 s until the
        # drain's timeout, not given up after a bounded count.
        refused = sorted(e["t"] for e in lab.evictions(node="node-2", outcome="TooManyRequests") if e["name"] == "db-0-a")
        assert len(refused) >= 4, refused
        assert all(4.5 <= b - a < 7.5 for a, b in zip(refused, refused[1:])), refused
        assert fleet.raw("node-2") == before["node-2"], "a GPU was touched"
        node2 = fleet.node("node-2")
        assert not node2["spec"].get("unschedulable"), "nothing changed on the GPUs, so the node must be uncordoned"
        assert node2["metadata"]["labels"][STATE] == "failed"
        assert node2["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "true"
        assert roll_annotations(node2)["gpuops.provision/roll-phase"] == "failed"
        # The roll stopped: node-3 needed a change but was never touched.
        assert fleet.node_patches("node-3") == [] and lab.evictions(node="node-3") == []
        assert fleet.raw("node-3") == before["node-3"]
        assert not os.path.exists(os.path.join(str(tmp_path), "node-2.lock"))


def test_gi_creation_fault_on_node2_restores_it_and_stops_the_roll(tmp_path):
    node2 = {"faults": {"fail_gi_create_after": 1, "fail_gi_create_error": "INSUFFICIENT_RESOURCES", "fail_gi_create_times": 1},
             "gpus": [gpu(instances=H100_3G_X2)]}
    fleet = Fleet(tmp_path, three_nodes(node2=node2))
    with fleet.start() as lab:
        node3_before = fleet.raw("node-3")
        rc, out = fleet.run()
        assert rc != 0
        msg = " ".join(failures(out)["node-2"])
        assert "stage apply" in msg and "restored" in msg
        assert fleet.state("node-2")["counters"]["gi_create"] >= 2  # the fault fired
        assert counts(fleet.state("node-2")) == [9, 9], "previous geometry (3g.40gb x2) not restored"
        n2 = fleet.node("node-2")
        assert n2["metadata"]["labels"][STATE] == "failed"
        assert n2["spec"]["unschedulable"] is True, "a failed node whose GPUs were touched stays cordoned"
        assert mig_allocatable(n2) == {"nvidia.com/mig-3g.40gb": 2}
        assert fleet.node_patches("node-3") == [] and fleet.raw("node-3") == node3_before
        assert roll_annotations(n2)["gpuops.provision/roll-phase"] == "failed"
        stats = out["global_custom_stats"]["mig_reconfigure"]
        assert stats["nodes"]["node-2"]["result"] == "failed" and stats["nodes"]["node-2"]["restored"] is True
        # The failure budget (default 0) is spent, counted from the cluster: node-3 was not started, and says why.
        assert stats["nodes"]["node-3"]["result"] == "not_started" and stats["nodes"]["node-3"]["drained"] is False
        assert stats["nodes"]["node-3"]["reason"] == ("node-3: not started: the roll's failure budget is spent: 1 node(s) "
                                                      "failed (node-2), more than max_failures 0")
        assert fleet.node_patches("node-1") == []
        # The roll's lock was released although the run failed (its release play runs on localhost).
        assert roll_lease(fleet)["spec"].get("holderIdentity") in (None, "")


def test_check_mode_changes_nothing_anywhere(tmp_path):
    fleet = Fleet(tmp_path, three_nodes())
    with fleet.start():
        before = {n: fleet.raw(n) for n in fleet.nodes}
        rc, out = fleet.run(check=True)
        assert rc == 0, failures(out)
        assert fleet.writes() == []
        assert {n: fleet.raw(n) for n in fleet.nodes} == before
        nodes = out["global_custom_stats"]["mig_reconfigure"]["nodes"]
        assert nodes["node-1"]["result"] == "skipped" and nodes["node-2"]["result"] == nodes["node-3"]["result"] == "planned"


def test_invalid_input_fails_naming_every_node_before_any_cordon(tmp_path):
    fleet = Fleet(tmp_path, three_nodes(), host_vars={"node-2": {"mig_reconfigure_selected": "too-big"},
                                                      "node-3": {"mig_reconfigure_selected": "no-such-config"}})
    with fleet.start():
        before = {n: fleet.raw(n) for n in fleet.nodes}
        rc, out = fleet.run()
        assert rc != 0
        msg = failures(out)["node-1"][0]
        assert "invalid input on 2 node(s)" in msg
        assert "[node-2]" in msg and "3g.40gb" in msg and "[node-3]" in msg and "no-such-config" in msg
        assert fleet.writes() == []
        assert {n: fleet.raw(n) for n in fleet.nodes} == before


def test_lock_held_by_another_run_touches_nothing(tmp_path):
    fleet = Fleet(tmp_path, three_nodes())
    lock = os.path.join(str(tmp_path), "node-2.lock")
    other = "gpuops.provision.mig_reconfigure run 0badc0de (user=alice controller=awx-1 node=node-2)"
    # Another role run keeps node-2's lock between its tasks: what its lock task leaves on the node.
    subprocess.run([sys.executable, HOSTLOCK, "acquire", "--path", lock, "--holder", other], check=True, capture_output=True)
    with fleet.start():
        before = {n: fleet.raw(n) for n in fleet.nodes}
        rc, out = fleet.run()
        assert rc != 0
        # The plan's refusal is reported once, by its run_once task (which fails every host).
        msg = " ".join(m for ms in failures(out).values() for m in ms)
        # Refused in the plan (it takes the lock too), naming the holder, before any node is cordoned.
        assert "[node-2] another MIG run holds the per-host lock %s: %s (kept across its tasks since" % (lock, other) in msg
        assert fleet.writes() == []
        assert {n: fleet.raw(n) for n in fleet.nodes} == before
        assert lock_holder(lock) == other, "another run's lock was removed"


def test_while_the_role_holds_a_node_a_direct_mig_geometry_run_is_refused_naming_it(tmp_path):
    # Evicted pods linger 8 s: node-2's turn (its lease on the lock) lasts at least that long.
    fleet = Fleet(tmp_path, three_nodes(), group_vars=dict(NO_BOOT, mig_reconfigure_drain_timeout=60))
    lock = os.path.join(str(tmp_path), "node-2.lock")
    with fleet.start(eviction_delay=8) as lab:
        roll = {}
        thread = threading.Thread(target=lambda: roll.update(result=fleet.run()))
        thread.start()
        deadline = time.monotonic() + 300
        holder = None
        while not (holder or "").startswith("gpuops.provision.mig_reconfigure "):
            assert thread.is_alive() and time.monotonic() < deadline, "the role never took node-2's lock: %s" % roll
            time.sleep(0.1)
            holder = lock_holder(lock, kind="lease")
        before = fleet.raw("node-2")
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "collections"), GPUOPS_MIG_LOCK=lock,
                   **library_env(fleet.states["node-2"]))
        args = {"devices": [{"devices": "all", "mig-enabled": False}], "force": True}
        direct = subprocess.run([sys.executable, "-m", "ansible_collections.gpuops.provision.plugins.modules.mig_geometry",
                                 json.dumps({"ANSIBLE_MODULE_ARGS": args})], env=env, cwd=str(tmp_path),
                                capture_output=True, text=True, check=False, timeout=120)
        untouched = fleet.raw("node-2") == before
        thread.join(timeout=900)
        rc, out = roll["result"]
        assert rc == 0, failures(out)
        res = json.loads(direct.stdout)
        assert res.get("failed") is True and res["changed"] is False and untouched, (direct.stdout, direct.stderr)
        assert res["msg"].startswith("another MIG run holds the per-host lock %s: %s (" % (lock, holder)), res["msg"]
        assert "node=node-2" in holder and res["lock"]["held_by"]["holder"] == holder
        # The roll went on unharmed and released the lock at the end.
        assert mig_allocatable(fleet.node("node-2")) == {"nvidia.com/mig-" + k: v for k, v in BALANCED_H100.items()}
        assert lab.cordons("node-2", value=False) == 1
        assert lock_holder(lock) is None and not os.path.exists(lock)


def test_drain_wait_timeout_fails_the_node_and_stops_the_roll(tmp_path):
    # Evicted pods linger 20 s; the drain's timeout is 3 s: pods still terminating would hold the GPUs, so that is
    # a failed drain.
    fleet = Fleet(tmp_path, three_nodes(), group_vars=dict(NO_BOOT, mig_reconfigure_drain_timeout=3,
                                                           mig_reconfigure_drain_grace_period=None))
    with fleet.start(eviction_delay=20) as lab:
        before = {n: fleet.raw(n) for n in fleet.nodes}
        rc, out = fleet.run()
        assert rc != 0
        msg = " ".join(failures(out)["node-2"])
        assert "drain did not finish within 3 s: pods still on the node: ml/inference-7d9f-node-2" in msg, msg
        assert "No GPU was touched" in msg
        assert fleet.raw("node-2") == before["node-2"]
        node2 = fleet.node("node-2")
        assert node2["metadata"]["labels"][STATE] == "failed" and not node2["spec"].get("unschedulable")
        assert fleet.node_patches("node-3") == [] and fleet.raw("node-3") == before["node-3"]
        assert out["global_custom_stats"]["mig_reconfigure"]["nodes"]["node-3"]["result"] == "not_started"


def host_tasks(out, host):
    """The names of the tasks that ran on ``host`` (not skipped), in the order the JSON callback reports them."""
    # A role's task is named "<role> : <name>" (ansible-core Task.get_name).
    return [t["task"]["name"].rpartition(" : ")[2] for play in out["plays"] for t in play["tasks"]
            if host in t["hosts"] and not t["hosts"][host].get("skipped")]


def refused_before_any_write(fleet, extra_vars=None):
    """Run a roll the plan must refuse: it fails and writes nothing to the cluster; returns every failure message."""
    rc, out = fleet.run(extra_vars=extra_vars)
    assert rc != 0 and fleet.writes() == []
    return " ".join(" ".join(v) for v in failures(out).values())


def test_plan_refuses_mig_manager_nodes_and_ci_profiles_before_any_cordon(tmp_path):
    fleet = Fleet(tmp_path, three_nodes(), group_vars=NO_BOOT)
    # The operator labels every MIG-capable node for mig-manager, also with migManager disabled in the ClusterPolicy
    # (state_manager.go addGPUStateLabels): with no mig-manager DaemonSet, the label alone does not refuse nvml.
    for node in fleet.fixture["nodes"]:
        node["metadata"]["labels"]["nvidia.com/gpu.deploy.mig-manager"] = "true"
    with fleet.start() as lab:
        rc, out = fleet.run(check=True)
        assert rc == 0, failures(out)
        # migManager enabled again; a taint its DaemonSet does not tolerate keeps its pod off node-1 and node-2.
        for name in ("node-1", "node-2"):
            lab.core.patch_node(name, {"spec": {"taints": [{"key": "example.com/no-mig-manager", "effect": "NoSchedule"}]}})
        lab.create(kube_seed.workload_object("DaemonSet", {"metadata": {"name": "nvidia-mig-manager", "namespace": "gpu-operator"}}, 0))
        lab.wait_for(lambda: [p.spec.node_name for p in lab.running_pods("gpu-operator")
                              if p.metadata.labels.get("app") == "nvidia-mig-manager"] == ["node-3"], what="mig-manager on node-3")
        writes = len(fleet.writes())
        rc, out = fleet.run()
        assert rc != 0 and len(fleet.writes()) == writes
        msg = " ".join(" ".join(v) for v in failures(out).values())
        assert "[node-3] the GPU Operator's mig-manager runs on this node (pod nvidia-mig-manager-" in msg
        assert "[node-2]" not in msg
        ci = {"version": "v1", "mig-configs": {"all-balanced": [
            {"devices": "all", "mig-enabled": True, "mig-devices": {"1c.3g.40gb": 2, "3g.40gb": 1}}]}}
        rc, out = fleet.run(extra_vars={"mig_reconfigure_config": ci, "mig_reconfigure_hosts": "node-1,node-2"})
        assert rc != 0 and len(fleet.writes()) == writes
        msg = " ".join(" ".join(v) for v in failures(out).values())
        assert "compute-instance profile(s) 1c.3g.40gb are not registered by the NVIDIA device plugin" in msg


def test_unselected_gpus_count_paused_labels_recover_and_an_operator_cordon_stays(tmp_path):
    # node-2 has an L40S that no entry selects: the device plugin still advertises it as nvidia.com/gpu, and the
    # wait for the resources must expect it. Its device-plugin label was left paused by an interrupted run.
    node2 = {"gpus": [gpu(instances=H100_3G_X2), {"model": "NVIDIA L40S"}]}
    fleet = Fleet(tmp_path, three_nodes(node2=node2), group_vars=NO_BOOT)
    labels2 = fleet.fixture["nodes"][1]["metadata"]["labels"]
    labels2["nvidia.com/gpu.deploy.device-plugin"] = "paused-for-mig-change"
    fleet.fixture["nodes"][2]["spec"] = {"unschedulable": True}  # cordoned by an operator before the roll
    fleet.fixture["daemonsets"].append({"metadata": {"name": "nvidia-operator-validator", "namespace": "gpu-operator"},
                                        "nodeSelector": {"kubernetes.io/hostname": "node-2"}})
    with fleet.start() as lab:
        rc, out = fleet.run()
        assert rc == 0, failures(out)
        # mig-manager restarts the validator after a change (reconfigure.go restartValidatorPod).
        assert pod_deletes(lab, "nvidia-operator-validator-", "node-2") == 1
        n2, n3 = fleet.node("node-2"), fleet.node("node-3")
        assert mig_allocatable(n2) == {"nvidia.com/mig-" + k: v for k, v in BALANCED_H100.items()}
        assert n2["status"]["allocatable"]["nvidia.com/gpu"] == "1"
        assert n2["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "true"
        assert n2["metadata"]["labels"]["nvidia.com/gpu.deploy.gpu-feature-discovery"] == "true"
        assert n2["metadata"]["labels"]["nvidia.com/gpu.deploy.dcgm-exporter"] == "false"
        assert not n2["spec"].get("unschedulable")
        assert n3["metadata"]["labels"][STATE] == "success" and n3["spec"]["unschedulable"] is True


# --- backend gpu_operator: the lab's mig-manager (lab/kube/gpu_operator.py) changes the GPUs -------------------------

def gpu_operator_fleet(tmp_path, node2=None):
    """Nodes labelled as the GPU Operator leaves them: mig-manager deployed, each node's current configuration in
    nvidia.com/mig.config (node-1 all-balanced; node-2/3 all-3g), the ConfigMap the ClusterPolicy names."""
    fleet = Fleet(tmp_path, three_nodes(node2=node2), label_selected=False,
                  group_vars={"mig_reconfigure_backend": "gpu_operator", "mig_reconfigure_mig_manager_timeout": 60})
    fleet.fixture["migManager"] = {"configMap": "custom-mig-parted-config", "namespace": "gpu-operator", "stepDelay": 0.3}
    fleet.fixture["configmaps"] = [{"metadata": {"name": "custom-mig-parted-config", "namespace": "gpu-operator"},
                                    "data": {"config.yaml": yaml.safe_dump(CONFIG)}}]
    fleet.fixture["daemonsets"].append({"metadata": {"name": "nvidia-mig-manager", "namespace": "gpu-operator"}})
    for node in fleet.fixture["nodes"]:
        name = node["metadata"]["name"]
        node["metadata"]["labels"].update({"nvidia.com/gpu.deploy.mig-manager": "true",
                                           "nvidia.com/mig.config": "all-balanced" if name == "node-1" else "all-3g"})
        fleet.fixture["pods"].append({"metadata": {"name": "nvidia-mig-manager-" + name, "namespace": "gpu-operator",
                                                   "labels": {"app": "nvidia-mig-manager"},
                                                   "ownerReferences": [{"kind": "DaemonSet", "name": "nvidia-mig-manager"}]},
                                      "spec": {"nodeName": name}})
    return fleet


def test_gpu_operator_backend_mig_manager_applies_only_changed_nodes_are_drained(tmp_path):
    fleet = gpu_operator_fleet(tmp_path)
    with fleet.start() as lab:
        node1_before = fleet.raw("node-1")
        rc, out = fleet.run()
        assert rc == 0, failures(out)
        assert fleet.node_patches("node-1") == [] and lab.evictions(node="node-1") == []
        assert fleet.raw("node-1") == node1_before
        for name in ("node-2", "node-3"):
            node = fleet.node(name)
            labels = node["metadata"]["labels"]
            # mig-manager's transitions (reconfigure.go Run): its start-up assert (success), then pending -> success.
            assert lab.mig_manager_states(name)[-2:] == ["pending", "success"], lab.mig_manager_states(name)
            assert labels[STATE] == "success" and labels["nvidia.com/mig.config"] == "all-balanced"
            assert labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
            assert mig_allocatable(node) == {"nvidia.com/mig-" + k: v for k, v in BALANCED_H100.items()}
            assert lab.cordons(name) == 1 and lab.cordons(name, value=False) == 1
            outcomes = [e["outcome"] for e in lab.evictions(node=name)]  # replacements may land here: see above
            assert "Evicted" in outcomes and set(outcomes) <= {"Evicted", "TooManyRequests"}, outcomes
            # The role never wrote the state label itself, nor paused operands: that is mig-manager's part.
            for patch in fleet.node_patches(name):
                written = (patch.get("body") or {}).get("metadata", {}).get("labels", {})
                assert written.get(STATE) is None and not any(k.startswith("nvidia.com/gpu.deploy.") for k in written)
        # mig-manager read the role's document: the same mig-parted v1 configuration as mig_reconfigure_config.
        cm = lab.get_json("/api/v1/namespaces/gpu-operator/configmaps/custom-mig-parted-config")
        assert yaml.safe_load(cm["data"]["config.yaml"]) == CONFIG
        t2, t3 = fleet.timeline("node-2"), fleet.timeline("node-3")
        assert t2[1] < t3[0]


def test_gpu_operator_backend_failure_goes_back_to_the_previous_config_and_stops(tmp_path):
    # Every ordering mig-parted tries for all-balanced fails its first GPU instance (12 distinct orderings of
    # 3g, 2g, 1g, 1g); going back to all-3g then succeeds.
    node2 = {"faults": {"fail_gi_create_after": 0, "fail_gi_create_times": 12}, "gpus": [gpu(instances=H100_3G_X2)]}
    fleet = gpu_operator_fleet(tmp_path, node2=node2)
    with fleet.start() as lab:
        node3_before = fleet.raw("node-3")
        rc, out = fleet.run()
        assert rc != 0
        msg = " ".join(failures(out)["node-2"])
        assert "mig-manager set nvidia.com/mig.config.state=failed for all-balanced" in msg
        assert "GPUs restored to their previous geometry" in msg
        assert lab.mig_manager_states("node-2")[-4:] == ["pending", "failed", "pending", "success"]
        assert counts(fleet.state("node-2")) == [9, 9]
        n2 = fleet.node("node-2")
        assert n2["metadata"]["labels"]["nvidia.com/mig.config"] == "all-3g"
        assert n2["spec"]["unschedulable"] is True
        assert fleet.node_patches("node-3") == [] and fleet.raw("node-3") == node3_before
        assert out["global_custom_stats"]["mig_reconfigure"]["nodes"]["node-2"]["restored"] is True


def test_gpu_operator_backend_refuses_nodes_without_mig_manager(tmp_path):
    """node-3 carries nvidia.com/gpu.deploy.mig-manager=true, but a taint mig-manager's DaemonSet does not tolerate
    keeps its pod off (the DaemonSet controller's NodeShouldRunDaemonPod): refused before any cordon."""
    fleet = gpu_operator_fleet(tmp_path)
    fleet.fixture["nodes"][2]["spec"] = {"taints": [{"key": "example.com/no-mig-manager", "effect": "NoSchedule"}]}
    with fleet.start():
        msg = refused_before_any_write(fleet)
        assert ("[node-3] backend gpu_operator needs the GPU Operator's mig-manager running on this node, but no "
                "Running app=nvidia-mig-manager pod is on it (nvidia.com/gpu.deploy.mig-manager is true;") in msg
        assert "[node-2]" not in msg


def test_gpu_operator_backend_refuses_a_cluster_policy_that_does_not_name_its_config_map(tmp_path):
    """object_controls.go TransformMIGManager: without spec.migManager.config.name mig-manager runs on a config it
    generates and never reads the role's ConfigMap: refused in the plan, before any cordon."""
    fleet = gpu_operator_fleet(tmp_path)
    fleet.fixture["clusterPolicy"] = {}
    with fleet.start():
        msg = refused_before_any_write(fleet)
        assert ("[node-2] mig-manager does not read the ConfigMap custom-mig-parted-config: ClusterPolicy cluster-policy "
                "names no config (spec.migManager.config.name), so mig-manager generates its configuration from the "
                "hardware") in msg


def test_gpu_operator_backend_rolls_to_a_new_config_name_once_mig_manager_sees_it(tmp_path):
    """The ConfigMap has no inference-2x3g yet; the role adds it and selects it. mig-manager reads the kubelet's copy,
    refreshed only at the kubelet's sync (configSyncPeriod 40 s here, a kubelet's is about a minute): the role waits until the copy on the node holds
    the new content before it sets nvidia.com/mig.config."""
    fleet = gpu_operator_fleet(tmp_path)
    fleet.fixture["migManager"]["configSyncPeriod"] = 40
    config = dict(CONFIG, **{"mig-configs": dict(CONFIG["mig-configs"], **{"inference-2x3g": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]})})
    with fleet.start() as lab:
        rc, out = fleet.run(extra_vars={"mig_reconfigure_config": config, "mig_reconfigure_selected": "inference-2x3g",
                                        "mig_reconfigure_hosts": "node-1"})
        assert rc == 0, failures(out)
        labels = fleet.node("node-1")["metadata"]["labels"]
        assert labels[STATE] == "success" and labels["nvidia.com/mig.config"] == "inference-2x3g"
        assert counts(fleet.state("node-1")) == [9, 9]
        assert "failed" not in lab.mig_manager_states("node-1")


# --- the roll's budget (issue 16 point 2): waves from the plan, refused before any cordon when it cannot hold -------

M3G = "nvidia.com/mig-3g.40gb"


def test_a_capacity_floor_the_roll_cannot_hold_fails_before_the_first_cordon(tmp_path):
    # 3g.40gb now: node-1 one, node-2 and node-3 two each (5); all-balanced leaves one each. With a floor of 3,
    # node-2 alone may go (3 left), but node-3 then leaves node-1's and node-2's new one (2): refused in the plan.
    fleet = Fleet(tmp_path, three_nodes())
    with fleet.start():
        fleet.lab.wait_for(lambda: sum(mig_allocatable(fleet.node(n)).get(M3G, 0) for n in fleet.nodes) == 5,
                           timeout=60, what="the device plugin to advertise the 3g.40gb instances")
        before = {n: fleet.raw(n) for n in fleet.nodes}
        rc, out = fleet.run(extra_vars={"mig_reconfigure_capacity_floor": {M3G: 3}})
        assert rc != 0
        msgs = [m for ms in failures(out).values() for m in ms]
        assert any("gpuops.provision.mig_roll_waves: node node-3 cannot be drained even alone (capacity floor: "
                   "nvidia.com/mig-3g.40gb would drop to 2 schedulable, floor 3); no node is drained" in m for m in msgs), msgs
        assert fleet.writes() == [] and {n: fleet.raw(n) for n in fleet.nodes} == before


def test_the_budget_sets_the_waves_and_counts_an_operator_cordon(tmp_path):
    fleet = Fleet(tmp_path, three_nodes(), group_vars=NO_BOOT)
    budget = {"mig_reconfigure_max_parallel": 0, "mig_reconfigure_max_unavailable": 2}
    with fleet.start():
        rc, out = fleet.run(check=True, extra_vars=budget)
        assert rc == 0, failures(out)
        roll = out["global_custom_stats"]["mig_reconfigure"]["roll"]
        assert roll["waves"] == [["node-2", "node-3"]] and roll["max_unavailable"] == 2
    # node-1 (unchanged) cordoned by an operator: it takes one of the two places.
    fleet = Fleet(tmp_path / "cordoned", three_nodes(), group_vars=NO_BOOT)
    fleet.fixture["nodes"][0]["spec"] = {"unschedulable": True}
    with fleet.start():
        rc, out = fleet.run(check=True, extra_vars=budget)
        assert rc == 0, failures(out)
        roll = out["global_custom_stats"]["mig_reconfigure"]["roll"]
        assert roll["waves"] == [["node-2"], ["node-3"]] and roll["unavailable_before"] == ["node-1"]
        assert fleet.writes() == []


def test_a_node_with_the_skip_label_is_never_drained(tmp_path):
    fleet = Fleet(tmp_path, three_nodes(), group_vars=NO_BOOT)
    fleet.fixture["nodes"][2]["metadata"]["labels"]["gpuops.io/mig-reconfigure"] = "skip"
    with fleet.start():
        rc, out = fleet.run(check=True)
        assert rc == 0, failures(out)
        nodes = out["global_custom_stats"]["mig_reconfigure"]["nodes"]
        assert nodes["node-3"]["result"] == "skipped" and nodes["node-2"]["result"] == "planned"
        assert out["global_custom_stats"]["mig_reconfigure"]["roll"]["waves"] == [["node-2"]]


def test_a_budget_of_zero_unavailable_nodes_refuses_the_roll_before_any_cordon(tmp_path):
    fleet = Fleet(tmp_path, three_nodes())
    with fleet.start():
        rc, out = fleet.run(extra_vars={"mig_reconfigure_max_unavailable": 0})
        assert rc != 0
        msgs = [m for ms in failures(out).values() for m in ms]
        assert any("node node-2 cannot be drained even alone (max_unavailable 0" in m for m in msgs), msgs
        assert fleet.writes() == []


# --- the roll's lock, failure budget and wait for jobs (issue 16 point 2) -----------------------------------------

OTHER_ROLL = "gpuops.provision.mig_reconfigure 0badc0de (user=alice controller=awx-1 awx_job=42)"


def hold_lease(fleet, holder=OTHER_ROLL, nodes="node-2,node-9", age=5, ttl=3600):
    """Another roll's live lock, as its roll_lock task leaves it."""
    import kubernetes  # pylint: disable=import-outside-toplevel
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.500000Z", time.gmtime(time.time() - age))
    kubernetes.client.CoordinationV1Api(fleet.lab.api_client).create_namespaced_lease("kube-system", {
        "metadata": {"name": "gpuops-mig-reconfigure", "namespace": "kube-system",
                     "annotations": {"gpuops.io/roll-nodes": nodes}},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": ttl, "acquireTime": stamp, "renewTime": stamp}})


def test_a_roll_started_while_another_holds_the_lock_is_refused_before_any_cordon(tmp_path):
    fleet = Fleet(tmp_path, three_nodes(), group_vars=NO_BOOT)
    with fleet.start():
        hold_lease(fleet)
        before = {n: fleet.raw(n) for n in fleet.nodes}
        version = roll_lease(fleet)["metadata"]["resourceVersion"]
        for check in (True, False):  # check mode says so too
            rc, out = fleet.run(check=check)
            assert rc != 0
            msgs = [m for ms in failures(out).values() for m in ms]
            assert any(("another roll holds the lock kube-system/gpuops-mig-reconfigure: %s (nodes node-2, node-9; "
                        % OTHER_ROLL) in m and m.endswith("nothing was changed") for m in msgs), msgs
            assert fleet.writes() == [], "a refused roll wrote to the cluster"
        assert {n: fleet.raw(n) for n in fleet.nodes} == before
        assert roll_lease(fleet)["metadata"]["resourceVersion"] == version, "the other roll's lock was touched"
        # With the lock switched off the plan does not look at it.
        rc, out = fleet.run(check=True, extra_vars={"mig_reconfigure_roll_lock": False})
        assert rc == 0, failures(out)
        # Another lock name (another pool rolled on its own) is not held: that roll goes ahead.
        rc, out = fleet.run(extra_vars={"mig_reconfigure_roll_lock_name": "gpuops-mig-pool-b"})
        assert rc == 0, failures(out)
        assert roll_lease(fleet, "gpuops-mig-pool-b")["spec"].get("holderIdentity") in (None, "")


def test_the_plan_clears_the_per_host_lock_an_expired_roll_left_on_a_node_that_does_not_change(tmp_path):
    # The roll whose controller died between node-1's release and its unlock: its Lease expired, node-1's per-host
    # lock still held under its name. The plan clears it (once, delegated to node-1: plan.yml's lock-clearing task).
    fleet = Fleet(tmp_path, three_nodes(), group_vars=NO_BOOT)
    lock1 = os.path.join(str(tmp_path), "node-1.lock")
    subprocess.run([sys.executable, HOSTLOCK, "acquire", "--path", lock1, "--holder", OTHER_ROLL + " (node=node-1)"],
                   check=True, capture_output=True)
    with fleet.start():
        hold_lease(fleet, age=7200, ttl=3600)
        assert lock_holder(lock1) == OTHER_ROLL + " (node=node-1)"
        rc, out = fleet.run(check=True)  # check mode clears nothing
        assert rc == 0, failures(out)
        assert lock_holder(lock1) == OTHER_ROLL + " (node=node-1)"
        rc, out = fleet.run()
        assert rc == 0, failures(out)
        assert lock_holder(lock1) is None, "the plan left the interrupted roll's lock on node-1"
        cleared = [t for p in out["plays"] for t in p["tasks"]
                   if t["task"]["name"].endswith("Clear the per-host lock an interrupted roll left on a node")]
        assert [r["item"]["host"] for t in cleared for h in t["hosts"].values() for r in h["results"]] == ["node-1"]
        assert all(fleet.node(n)["metadata"]["labels"][STATE] == "success" for n in ("node-2", "node-3"))


def test_within_the_failure_budget_the_roll_goes_on_and_the_run_still_fails(tmp_path):
    node2 = {"faults": {"fail_gi_create_after": 1, "fail_gi_create_error": "INSUFFICIENT_RESOURCES", "fail_gi_create_times": 1},
             "gpus": [gpu(instances=H100_3G_X2)]}
    fleet = Fleet(tmp_path, three_nodes(node2=node2))
    with fleet.start():
        rc, out = fleet.run(extra_vars={"mig_reconfigure_max_failures": 1})
        assert rc != 0, "a failed node must fail the run"
        assert set(failures(out)) == {"node-2"}
        assert "MIG reconfigure failed on node-2 at stage apply" in " ".join(failures(out)["node-2"])
        stats = out["global_custom_stats"]["mig_reconfigure"]
        assert stats["roll"]["max_failures"] == 1 and "stopped_at" not in stats
        assert stats["nodes"]["node-2"]["result"] == "failed" and stats["nodes"]["node-3"]["result"] == "success"
        assert counts(fleet.state("node-2")) == [9, 9] and counts(fleet.state("node-3")) == [9, 14, 19, 19]
        assert fleet.node("node-3")["metadata"]["labels"][STATE] == "success"
        # The boot-time re-apply declared the new geometry before the MIG change (reconfigure.go persistConfigIfNeeded
        # before applyMigModeChange), so a reboot meanwhile comes back to the new layout...
        order = host_tasks(out, "node-2")
        assert order.index("Read the boot-time declaration as it is before the change") < order.index("The declared geometry") < \
            order.index("Apply the MIG geometry") < order.index("Put the boot-time declaration back as it was before the roll")
        # ...and the rollback declared the geometry the node went back to (it had no declaration before): a reboot
        # of the failed node and the applier, run as the unit runs it, give back its previous layout.
        declared = json.load(open(os.path.join(str(tmp_path), "boot", "node-2", "mig-config.json"), encoding="utf-8"))
        assert declared["selected"] == "gpuops-previous"
        assert declared["config"]["mig-configs"]["gpuops-previous"] == [
            {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]
        boot = os.path.join(str(tmp_path), "boot", "node-2")
        assert sorted(os.listdir(os.path.join(boot, "lib"))) == ["gpuops_mig_apply.py", "gpuops_mig_apply.sources.json"]
        subprocess.run([sys.executable, "-m", "gpusim", "reboot"], check=True,
                       env=dict(os.environ, PYTHONPATH=GPUSIM, GPUSIM_STATE=fleet.states["node-2"]))
        env = dict(os.environ, **library_env(fleet.states["node-2"]))
        applier = [sys.executable, os.path.join(boot, "lib", "gpuops_mig_apply.py"), os.path.join(boot, "mig-config.json")]
        done = subprocess.run(applier, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0 and counts(fleet.state("node-2")) == [9, 9], done.stderr
        assert json.load(open(os.path.join(str(tmp_path), "boot", "node-3", "mig-config.json"), encoding="utf-8"))[
            "selected"] == "all-balanced"
        assert roll_lease(fleet)["spec"].get("holderIdentity") in (None, "")
        lease = lease_writes(fleet.lab)
        assert lease[0][1] == "POST" and lease[-1][2] == ""


def job_pod(node, name="train-0"):
    return {"metadata": {"name": name, "namespace": "ml", "labels": {"gpuops.io/job": "train"}}, "spec": {"nodeName": node}}


def test_the_drain_waits_for_the_jobs_on_the_node_to_finish(tmp_path):
    fleet = Fleet(tmp_path, three_nodes(), extra_pods=[job_pod("node-2")],
                  group_vars=dict(NO_BOOT, mig_reconfigure_wait_for_jobs_selector="gpuops.io/job=train",
                                  mig_reconfigure_wait_for_jobs_delay=1))
    finished = {}
    with fleet.start() as lab:
        def finish_after_cordon():
            lab.wait_for(lambda: lab.cordons("node-2") > 0, timeout=300, what="node-2 cordoned")
            time.sleep(6)
            lab.core.patch_namespaced_pod_status("train-0", "ml", {"status": {"phase": "Succeeded"}})
            finished["t"] = time.time()
        worker = threading.Thread(target=finish_after_cordon, daemon=True)
        worker.start()
        rc, out = fleet.run()
        worker.join(timeout=10)
        assert rc == 0, failures(out)
        cordon = fleet.timeline("node-2")[0]
        evicted = [e["t"] for e in lab.evictions(node="node-2")]
        assert evicted and cordon < finished["t"] <= min(evicted) + 0.5, (cordon, finished, evicted)
        # node-3 has no such pod: its drain does not wait.
        assert fleet.node("node-3")["metadata"]["labels"][STATE] == "success"


@pytest.mark.long
def test_jobs_that_do_not_finish_in_time_fail_the_node_untouched_or_are_drained(tmp_path):
    fail = dict(NO_BOOT, mig_reconfigure_wait_for_jobs_selector="gpuops.io/job=train", mig_reconfigure_wait_for_jobs_timeout=3,
                mig_reconfigure_wait_for_jobs_delay=1, mig_reconfigure_wait_for_jobs_on_timeout="fail")
    fleet = Fleet(tmp_path, three_nodes(), extra_pods=[job_pod("node-2")], group_vars=fail)
    with fleet.start() as lab:
        before = {n: fleet.raw(n) for n in fleet.nodes}
        rc, out = fleet.run()
        assert rc != 0
        msg = " ".join(failures(out)["node-2"])
        assert "at stage drain" in msg and "No GPU was touched" in msg
        assert "1 pod(s) matching gpuops.io/job=train were still running after 3 s: ml/train-0" in msg
        assert lab.evictions(node="node-2") == [] and fleet.raw("node-2") == before["node-2"]
        node2 = fleet.node("node-2")
        assert not node2["spec"].get("unschedulable") and node2["metadata"]["labels"][STATE] == "failed"
        assert out["global_custom_stats"]["mig_reconfigure"]["nodes"]["node-2"]["drained"] is False
        assert fleet.node_patches("node-3") == []
    # on_timeout=drain (the GPU Operator's choice): the drain evicts the job's pod (a ReplicaSet's here, which the
    # drain may evict) and the roll succeeds.
    pod = job_pod("node-2")
    pod["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "train"}]
    fleet = Fleet(tmp_path / "drain", three_nodes(), extra_pods=[pod], group_vars=dict(fail, mig_reconfigure_wait_for_jobs_on_timeout="drain"))
    with fleet.start() as lab:
        rc, out = fleet.run()
        assert rc == 0, failures(out)
        assert any(e["name"] == "train-0" and e["outcome"] == "Evicted" for e in lab.evictions(node="node-2"))
        assert fleet.node("node-2")["metadata"]["labels"][STATE] == "success"


# --- issue 45: a PodDisruptionBudget that holds for a while, a lock that outlives a long node --------------------

def test_a_pdb_that_blocks_while_the_replacement_starts_is_waited_out_as_kubectl_drain_does(tmp_path):
    # Replacement pods take 12 s to turn Ready (kwok's pod-ready Stage with a delay, lab/kube/controlplane.py), so the
    # inference PodDisruptionBudget (maxUnavailable 1) refuses node-3's eviction while node-2's replacement starts.
    # kubectl drain tries again every 5 s until its timeout; the old drain gave up after 3 quick attempts.
    fleet = Fleet(tmp_path, three_nodes(), group_vars=dict(NO_BOOT, mig_reconfigure_max_parallel=2,
                                                           mig_reconfigure_drain_timeout=90))
    fleet.fixture["podReadyDelaySeconds"] = 12
    with fleet.start() as lab:
        rc, out = fleet.run()
        assert rc == 0, failures(out)
        refused = [e for e in lab.evictions() if e["outcome"] == "TooManyRequests"]
        assert refused, "the PodDisruptionBudget never refused: the replacement was Ready at once"
        assert all("disruption budget" in e["message"] for e in refused)
        for name in ("node-2", "node-3"):
            assert fleet.node(name)["metadata"]["labels"][STATE] == "success"
            assert any(e["outcome"] == "Evicted" for e in lab.evictions(node=name)), name


@pytest.mark.long
def test_the_lock_is_renewed_beside_a_node_that_takes_longer_than_its_ttl(tmp_path):
    # Evicted pods take 40 s to go (their grace period), the lock lives 20 s: a second roll started meanwhile must
    # still find it held. Before, the lock was renewed only between waves and expired in the middle of this one.
    # 20 s, not less: the first gap measured below runs from the take to the renewer's first renewal, two ansible
    # tasks apart, and on a loaded machine that took 11.2 s (2026-12-07, the suite at -n 2 beside Molecule).
    fleet = Fleet(tmp_path, three_nodes(node3={"gpus": [gpu(instances=H100_BALANCED)]}),
                  group_vars=dict(NO_BOOT, mig_reconfigure_drain_grace_period=None, mig_reconfigure_drain_timeout=120,
                                  mig_reconfigure_roll_lock_ttl=20))
    with fleet.start(eviction_delay=40) as lab:
        first = {}
        thread = threading.Thread(target=lambda: first.update(result=fleet.run()))
        thread.start()
        lab.wait_for(lambda: lab.evictions(node="node-2"), timeout=300, what="node-2's drain")
        time.sleep(22)  # past the TTL, in the middle of the drain
        rc, out = fleet.run()
        assert rc != 0
        msgs = [m for ms in failures(out).values() for m in ms]
        assert any("another roll holds the lock kube-system/gpuops-mig-reconfigure" in m for m in msgs), msgs
        thread.join(timeout=900)
        rc, out = first["result"]
        assert rc == 0, failures(out)
        lease = lease_writes(lab)
        holder = lease[0][2]
        renewals = [w[0] for w in lease if w[2] == holder]
        assert max(b - a for a, b in zip(renewals, renewals[1:])) < 20 * 2 / 3.0, renewals
        assert lease[-1][2] == ""
