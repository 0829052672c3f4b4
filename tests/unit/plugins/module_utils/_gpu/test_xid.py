# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_gpu/xid.py: Xid lines of every driver format, the catalog rows, classify and summary.

The lines follow krcReportXid_IMPL's format strings (open-gpu-kernel-modules kernel_rc.c); the catalog values are
the ones of https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html.
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import xid


def _one(line):
    events = xid.parse(line)
    assert len(events) == 1, events
    return events[0]


# ----------------------------------------------------------------------------- formats

def test_pre_r570_known_process_with_dmesg_stamp():
    line = "[ 1234.567890] NVRM: Xid (PCI:0000:17:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    assert _one(line) == {
        "xid": 79, "pci": "0000:17:00", "pid": 1234, "process": "python", "gpu_instance": None,
        "compute_instance": None, "message": "GPU has fallen off the bus.", "time": 1234.56789, "line": line,
    }


def test_pre_r570_unknown_process_prints_quoted_pid_and_name_placeholders():
    ev = _one("NVRM: Xid (PCI:0000:65:00): 64, pid='<unknown>', name=<unknown>, Row Remapper: Failed to remap row")
    assert (ev["xid"], ev["pci"], ev["pid"], ev["process"]) == (64, "0000:65:00", None, None)
    assert ev["message"] == "Row Remapper: Failed to remap row"
    assert ev["time"] is None


def test_r570_and_later_print_no_pid_or_name_for_an_unknown_process():
    ev = _one("[   88.000001] NVRM: Xid (PCI:0000:CB:00): 119, Timeout after 6s of waiting for RPC response from GPU0"
              " GSP! Expected function 76 (GSP_RM_CONTROL) (0x2080014b 0x5).")
    assert (ev["xid"], ev["pci"], ev["pid"], ev["process"]) == (119, "0000:cb:00", None, None)
    assert ev["message"].startswith("Timeout after 6s of waiting") and ev["message"].endswith("(0x2080014b 0x5).")
    assert ev["time"] == pytest.approx(88.000001)


def test_r570_known_process_keeps_pid_and_name():
    ev = _one("NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=train.py, Graphics SM Warp Exception on (GPC 0, TPC 1,"
              " SM 0): Out Of Range Address")
    assert (ev["pid"], ev["process"]) == (4242, "train.py")
    assert ev["message"] == "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"


def test_mig_attribution_to_gpu_and_compute_instance():
    ev = _one("[ 5.5] NVRM: Xid (PCI:0000:17:00 GPU-I:01 GPU-CI:00): 31, pid=77, name=a.out, Ch 00000008, intr"
              " 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f_00000000. Fault is of type"
              " FAULT_PDE ACCESS_TYPE_VIRT_READ")
    assert (ev["xid"], ev["pci"], ev["gpu_instance"], ev["compute_instance"]) == (31, "0000:17:00", 1, 0)
    assert (ev["pid"], ev["process"]) == (77, "a.out")
    assert ev["message"].startswith("Ch 00000008, intr 10000000. MMU Fault")


def test_mig_attribution_to_gpu_instance_only():
    ev = _one("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, Contained: CE User Channel (0x9). RST: No, D-RST: No")
    assert (ev["gpu_instance"], ev["compute_instance"], ev["xid"]) == (5, None, 94)
    assert ev["message"] == "Contained: CE User Channel (0x9). RST: No, D-RST: No"


def test_journalctl_prefix_has_no_seconds_stamp():
    line = "Dec 03 10:00:00 gpu-node-7 kernel: NVRM: Xid (PCI:0000:41:00): 48, pid=999, name=nccl, An uncorrectable" \
           " double bit error (DBE) has been detected on GPU in the framebuffer at partition 1, subpartition 0."
    ev = _one(line)
    assert (ev["xid"], ev["pci"], ev["pid"], ev["process"], ev["time"]) == (48, "0000:41:00", 999, "nccl", None)
    assert ev["message"].startswith("An uncorrectable double bit error (DBE)")
    assert ev["line"] == line


def test_journalctl_short_monotonic_keeps_the_stamp():
    ev = _one("[ 7654.321000] gpu-node-7 kernel: NVRM: Xid (PCI:0000:41:00): 95, Uncontained: LTC TAG (0x2,0x0)."
              " RST: Yes, D-RST: No")
    assert (ev["xid"], ev["time"]) == (95, pytest.approx(7654.321))


def test_dmesg_notime_and_human_time_give_no_time():
    notime = _one("NVRM: Xid (PCI:0000:17:00): 45, pid=12, name=python3, Ch 00000010")
    human = _one("[Tue Dec  3 10:00:00 2024] NVRM: Xid (PCI:0000:17:00): 45, pid=12, name=python3, Ch 00000010")
    assert notime["time"] is None and human["time"] is None
    assert notime["xid"] == human["xid"] == 45 and notime["message"] == human["message"] == "Ch 00000010"


def test_kmsg_record_gives_the_microsecond_stamp():
    ev = _one("4,1289,1234567890,-;NVRM: Xid (PCI:0000:17:00): 79, GPU has fallen off the bus.")
    # exact: microseconds / 10**6, no rounding slack (approx's 1e-6 would let a wrong divisor through)
    assert ev["time"] == 1234.56789 and ev["xid"] == 79
    assert _one("6,7,1500000,-,caller=T1;NVRM: Xid (PCI:0000:17:00): 13, x")["time"] == 1.5


def test_r575_root_cause_suffix_stays_in_the_message():
    ev = _one("NVRM: Xid (PCI:0000:17:00): 45, pid=5, name=x, Ch 00000010 caused by previous Xid 48")
    assert ev["message"] == "Ch 00000010 caused by previous Xid 48"


@pytest.mark.parametrize("line,pid,name,message", [
    # empty message: "%s" of "" leaves ", " (or "," once a logger strips the trailing blank)
    ("NVRM: Xid (PCI:0000:17:00): 43, pid=1, name=app, ", 1, "app", ""),
    ("NVRM: Xid (PCI:0000:17:00): 43, pid=1, name=app,", 1, "app", ""),
    ("NVRM: Xid (PCI:0000:17:00): 43, ", None, None, ""),
    # an empty client name
    ("NVRM: Xid (PCI:0000:17:00): 43, pid=1, name=, Ch 1", 1, None, "Ch 1"),
    # older closed drivers: pid without a name
    ("NVRM: Xid (PCI:0000:10:00): 79, pid=0, GPU has fallen off the bus.", 0, None, "GPU has fallen off the bus."),
    # a line cut off right after the name: the name is kept whole
    ("NVRM: Xid (PCI:0000:17:00): 43, pid=1, name=app", 1, "app", ""),
    # a name that itself ends in a comma keeps it when a message follows
    ("NVRM: Xid (PCI:0000:17:00): 43, pid=1, name=app,, Ch 1", 1, "app,", "Ch 1"),
    # no blank after a comma (a mangled or re-joined line): no character of the pid, name or message is lost
    ("NVRM: Xid (PCI:0000:17:00): 79,GPU has fallen off the bus.", None, None, "GPU has fallen off the bus."),
    ("NVRM: Xid (PCI:0000:17:00): 79, pid=0,GPU has fallen off the bus.", 0, None, "GPU has fallen off the bus."),
    ("NVRM: Xid (PCI:0000:17:00): 13, pid=3,name=app, Ch 1", 3, "app", "Ch 1"),
    ("NVRM: Xid (PCI:0000:17:00): 13,pid=3, name=app, Ch 1", 3, "app", "Ch 1"),
    # a pid at the end of the line
    ("NVRM: Xid (PCI:0000:17:00): 79, pid=0", 0, None, ""),
    # trailing blanks, and a CRLF line end
    ("NVRM: Xid (PCI:0000:17:00): 79, GPU has fallen off the bus.  ", None, None, "GPU has fallen off the bus."),
    ("NVRM: Xid (PCI:0000:17:00): 79, GPU has fallen off the bus.\r", None, None, "GPU has fallen off the bus."),
])
def test_edge_forms_of_the_process_part(line, pid, name, message):
    ev = _one(line)
    assert (ev["pid"], ev["process"], ev["message"]) == (pid, name, message)


def test_oldest_format_without_pci_prefix_from_the_catalog_page():
    ev = _one("[...] NVRM: Xid (0000:03:00): 14, Channel 00000001")
    assert (ev["xid"], ev["pci"], ev["message"]) == (14, "0000:03:00", "Channel 00000001")


def test_non_xid_lines_are_ignored():
    log = "\n".join([
        "[ 5.320544] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build",
        "[ 99.000000] NVRM: GPU at PCI:0000:17:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae",
        "[ 99.000001] NVRM: GPU Board Serial Number: 1320123456789",
        "[ 99.000002] NVRM: GPU 0000:17:00.0: GPU has fallen off the bus.",
        "[ 99.000003] NVRM: GPU at 0000:17:00.0 has fallen off the bus.",
        # NVSwitch errors are SXids, another catalog: never Xids
        "[ 99.000004] nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV"
        " error (First)",
        "[ 99.000005] SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
        # ... even were an SXid's address printed without its function
        "[ 99.000005] nvidia-nvswitch0: SXid (PCI:0000:05:00): 20034, Fatal, Link 30 LTSSM Fault Up",
        "[ 99.000006] usb 1-1: new high-speed USB device number 2 using xhci_hcd",
        "NVRM: Xid (PCI:0000:17:00) 79 missing colon and comma",
        "",
    ])
    assert xid.parse(log) == []
    # the same log with one Xid line in it yields exactly that one
    events = xid.parse(log + "\n[ 99.5] NVRM: Xid (PCI:0000:17:00): 79, GPU has fallen off the bus.\n")
    assert [(e["xid"], e["time"]) for e in events] == [(79, 99.5)]


def test_several_lines_keep_log_order():
    log = ("[1.0] NVRM: Xid (PCI:0000:17:00): 13, pid=1, name=a, x\n"
           "[2.0] NVRM: Xid (PCI:0000:65:00): 79, y\n"
           "[3.0] NVRM: Xid (PCI:0000:17:00): 31, pid=2, name=b, z\n")
    assert [(e["xid"], e["pci"], e["time"]) for e in xid.parse(log)] == [
        (13, "0000:17:00", 1.0), (79, "0000:65:00", 2.0), (31, "0000:17:00", 3.0)]


def test_bad_input():
    assert xid.parse(None) == []
    assert xid.parse("") == []
    raw = b"[ 1.0] NVRM: Xid (PCI:0000:17:00): 79, pid=7, name=caf\xe9, GPU has fallen off the bus.\n\xff\xfe"
    ev = _one(raw)
    assert (ev["xid"], ev["pid"], ev["process"]) == (79, 7, "caf\ufffd")
    assert xid.parse(bytearray(b"NVRM: Xid (PCI:0000:17:00): 48, DBE"))[0]["xid"] == 48
    with pytest.raises(TypeError, match=r"^kernel log must be text or bytes, not int$"):
        xid.parse(42)
    with pytest.raises(TypeError, match=r"^kernel log must be text or bytes, not list$"):
        xid.parse(["NVRM: Xid (PCI:0000:17:00): 79, x"])


@pytest.mark.parametrize("address,slot", [
    ("0000:17:00.0", "0000:17:00"),
    ("0000:CB:00.1", "0000:cb:00"),  # lower case, as parse() gives the address of a line
    ("0000:17:00", "0000:17:00"),    # no function: already a slot
    (None, ""),
    ("", ""),
])
def test_slot_of_is_the_address_an_xid_line_names(address, slot):
    assert xid.slot_of(address) == slot


def test_slot_of_matches_the_pci_of_a_parsed_line():
    ev = _one("NVRM: Xid (PCI:0000:CB:00): 79, GPU has fallen off the bus.")
    assert xid.slot_of("0000:cb:00.0") == ev["pci"]


# ----------------------------------------------------------------------------- catalog

@pytest.mark.parametrize("code,row", [
    (48, ("ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48")),
    (79, ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM")),
    (94, ("ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP")),
    (95, ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU")),
    (13, ("ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY", "Graphics Engine Exception",
          "RESTART_APP")),
    (31, ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP")),
    (43, ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE")),
])
def test_catalog_rows_as_the_catalog_has_them(code, row):
    assert xid.CATALOG[code] == row


def test_catalog_covers_the_codes_a_health_gate_acts_on():
    wanted = {8, 13, 31, 32, 38, 43, 45, 48, 56, 57, 58, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120,
              121, 122, 123, 136, 140, 143, 144, 145, 146, 147, 148, 149, 150, 154, 155}
    assert wanted <= set(xid.CATALOG)
    actions = {row[2] for row in xid.CATALOG.values()}
    assert actions <= set(xid.NODE_ACTIONS) | {"RESTART_APP", "IGNORE", "WORKFLOW_XID_45", "XID_154"}


# ----------------------------------------------------------------------------- classify

@pytest.mark.parametrize("code", [48, 79, 95, 64, 74, 119, 140, 145, 151, 54, 58])
def test_classify_node(code):
    assert xid.classify(code) == "node"


@pytest.mark.parametrize("code", [13, 31, 43, 45, 94, 63, 92, 8, 121])
def test_classify_app(code):
    assert xid.classify(code) == "app"


@pytest.mark.parametrize("code", [1, 14, 999, 173, None])
def test_classify_unknown_outside_the_table(code):
    assert xid.classify(code) == "unknown"


def test_classify_154_follows_the_drivers_new_recovery_action():
    assert xid.classify(154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)") == "node"
    assert xid.classify(154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)") == "node"
    assert xid.classify(154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)") == "app"
    assert xid.classify(154) == "node"
    assert xid.classify(154, "garbled") == "node"


# ----------------------------------------------------------------------------- summary

def test_summary_per_pci_address():
    log = "\n".join([
        "[10.0] NVRM: Xid (PCI:0000:17:00): 13, pid=1, name=a, x",
        "[11.0] NVRM: Xid (PCI:0000:17:00): 13, pid=1, name=a, x",
        "[12.0] NVRM: Xid (PCI:0000:17:00): 48, DBE",
        "[13.0] NVRM: Xid (PCI:0000:17:00): 45, pid=1, name=a, Ch 1 caused by previous Xid 48",
        "[14.0] NVRM: Xid (PCI:0000:65:00 GPU-I:01 GPU-CI:00): 94, Contained: SM (0x1)",
        "[15.0] NVRM: Xid (PCI:0000:99:00): 9999, future code",
        "[16.0] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal",
    ])
    events = xid.parse(log)
    out = xid.summary(events)
    assert out == {
        "0000:17:00": {"codes": [13, 45, 48], "count": 4, "node_codes": [48], "last": events[3]},
        "0000:65:00": {"codes": [94], "count": 1, "node_codes": [], "last": events[4]},
        "0000:99:00": {"codes": [9999], "count": 1, "node_codes": [], "last": events[5]},
    }
    assert out["0000:17:00"]["last"]["time"] == 13.0 and out["0000:17:00"]["last"]["xid"] == 45
    assert xid.summary([]) == {}


def test_summary_takes_the_last_154_as_the_drivers_verdict():
    raised = "[1.0] NVRM: Xid (PCI:0000:17:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset" \
             " Required)"
    cleared = "[2.0] NVRM: Xid (PCI:0000:17:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to" \
              " 0x0 (None)"
    assert xid.summary(xid.parse(raised))["0000:17:00"]["node_codes"] == [154]
    both = xid.summary(xid.parse(raised + "\n" + cleared))["0000:17:00"]
    assert (both["codes"], both["count"], both["node_codes"]) == ([154], 2, [])
    again = xid.summary(xid.parse(cleared + "\n" + raised))["0000:17:00"]
    assert again["node_codes"] == [154]
