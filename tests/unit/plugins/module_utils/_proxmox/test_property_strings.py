"""Unit tests for module_utils/_proxmox/property_strings.py: PCI ids, hostpci/map property strings, the hostpci planner, hardware facts."""

from __future__ import annotations

import re

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import property_strings
from ansible_collections.gpuops.provision.plugins.module_utils._proxmox.property_strings import PciError


# ----------------------------------------------------------------------------- addresses and ids

@pytest.mark.parametrize("text,expected", [
    ("0000:01:00.0", "0000:01:00.0"),
    ("01:00.0", "0000:01:00.0"),
    ("01:00", "0000:01:00"),
    ("0000:0A:1f.3", "0000:0a:1f.3"),
    ("1:0.1", "0000:01:00.1"),
    ("10000:c1:00.0", "10000:c1:00.0"),
])
def test_normalize_pci_address(text, expected):
    assert property_strings.normalize_pci_address(text) == expected


@pytest.mark.parametrize("bad", ["", "01", "01:00.8", "zz:00.0", "0000:01:00.0.1", None, "01:00:00:00",
                                 # issue 14: a repair would be a guess - "01:00:00" is not domain 0001, and a
                                 # trailing newline or blank is not part of an address ("$" would let it through)
                                 "01:00:00", "0:01:00.0", "01:00.0\n", " 01:00.0", "01:00.0 "])
def test_bad_pci_address(bad):
    with pytest.raises(PciError):
        property_strings.parse_pci_address(bad)


def test_address_function_default_and_slot():
    assert property_strings.normalize_pci_address("01:00", function="0") == "0000:01:00.0"
    assert property_strings.normalize_pci_address("01:00.1", function="0") == "0000:01:00.1"
    assert property_strings.pci_slot("01:00.1") == "0000:01:00"


def test_address_covers_multifunction():
    assert property_strings.address_covers("01:00", "0000:01:00.1")  # no function = whole device
    assert property_strings.address_covers("0000:01:00.0", "0000:01:00.0")
    assert not property_strings.address_covers("01:00.0", "0000:01:00.1")
    assert not property_strings.address_covers("02:00", "0000:01:00.0")


@pytest.mark.parametrize("text,expected", [("10de:20b0", "10de:20b0"), ("10DE:20B0", "10de:20b0"),
                                           ("0x10de:0x20b0", "10de:20b0")])
def test_normalize_pci_id(text, expected):
    assert property_strings.normalize_pci_id(text) == expected


@pytest.mark.parametrize("bad", ["10de", "10de:20b0:1", "xyz1:0000", "10de:12345", 42,
                                 # issue 14: three digits could be 020b or a truncated 20b0
                                 "10de:20b", "0x10de:1", "10de:20b0\n", " 10de:20b0"])
def test_bad_pci_id(bad):
    with pytest.raises(PciError):
        property_strings.normalize_pci_id(bad)


def test_hex_id():
    assert property_strings.normalize_hex_id("0x10DE") == "10de"
    assert property_strings.normalize_hex_id(0x10DE) == "10de"
    with pytest.raises(PciError):
        property_strings.normalize_hex_id("0xg000")


@pytest.mark.parametrize("value,expected", [(True, "1"), ("on", "1"), ("YES", "1"), ("true", "1"), ("1", "1"),
                                            (False, "0"), ("off", "0"), ("no", "0"), ("0", "0")])
def test_parse_bool(value, expected):
    assert property_strings.parse_bool(value) == expected


def test_parse_bool_rejects():
    with pytest.raises(PciError):
        property_strings.parse_bool("maybe")


# ----------------------------------------------------------------------------- property strings

def test_split_property_string_has_no_quoting():
    # PVE::JSONSchema::parse_property_string splits on every comma: a quote is an ordinary character.
    assert property_strings.split_property_string('01:00,description="a,b=c",x=1') == [
        (None, "01:00"), ("description", '"a'), ("b", 'c"'), ("x", "1")]
    with pytest.raises(PciError, match="duplicate key"):
        property_strings.split_property_string('01:00,description="a,b"')  # the part 'b"' is a second default-key value
    assert property_strings.split_property_string('mapping=a,description="x"') == [("mapping", "a"), ("description", '"x"')]
    assert property_strings.split_property_string("01:00,, ,pcie=1") == [(None, "01:00"), ("pcie", "1")]  # blank parts skipped


@pytest.mark.parametrize("bad,msg", [
    ("01:00,pcie=", "missing key or value"),     # key=value needs a value (^([^=]+)=(.+)$)
    ("01:00,=1", "missing key or value"),
    ("01:00,pcie=1,pcie=0", "duplicate key"),
    ("01:00,02:00", "duplicate key"),
])
def test_split_property_string_refuses_what_pve_refuses(bad, msg):
    with pytest.raises(PciError, match=msg):
        property_strings.split_property_string(bad)


@pytest.mark.parametrize("a,b", [
    ("01:00,pcie=1", "host=0000:01:00,pcie=on"),
    ("pcie=1,x-vga=1,0000:01:00.0", "0000:01:00.0,x-vga=yes,pcie=true"),
    ("mapping=gpu1,rombar=1", "mapping=gpu1"),          # rombar default 1
    ("mapping=gpu1,pcie=0,x-vga=0,legacy-igd=0", "mapping=gpu1"),  # defaults 0
    ("mapping=gpu1,driver=vfio", "mapping=gpu1"),
    ("01:00.0,vendor-id=0x10DE", "01:00.0,vendor-id=0x10de"),
    ("01:00.4;01:00.5", "0000:01:00.4;0000:01:00.5"),
])
def test_hostpci_equivalent(a, b):
    assert property_strings.normalize_hostpci(a) == property_strings.normalize_hostpci(b)
    assert property_strings.format_hostpci(property_strings.normalize_hostpci(a)) == property_strings.format_hostpci(property_strings.normalize_hostpci(b))


@pytest.mark.parametrize("a,b", [
    ("01:00", "01:00.0"),             # all functions vs function 0
    ("mapping=gpu1,rombar=0", "mapping=gpu1"),
    ("mapping=gpu1,pcie=1", "mapping=gpu1"),
    ("01:00.4;01:00.5", "01:00.5;01:00.4"),  # functions in the order they reach the VM
    ("mapping=gpu1,mdev=nvidia-1", "mapping=gpu1,mdev=nvidia-2"),
])
def test_hostpci_different(a, b):
    assert property_strings.normalize_hostpci(a) != property_strings.normalize_hostpci(b)


def test_format_hostpci_canonical():
    norm = property_strings.normalize_hostpci("x-vga=on,pcie=yes,host=01:00,romfile=vbios.bin,rombar=0")
    assert property_strings.format_hostpci(norm) == "0000:01:00,pcie=1,rombar=0,romfile=vbios.bin,x-vga=1"
    assert property_strings.format_hostpci(property_strings.normalize_hostpci({"mapping": "a100", "mdev": "nvidia-1034"})) == "mapping=a100,mdev=nvidia-1034"


@pytest.mark.parametrize("bad,msg", [
    ("mapping=gpu1,host=01:00", "Cannot set both"),
    ("pcie=1", "Either 'host' or 'mapping'"),
    ("01:00,foo=1", "unknown hostpci property"),
    ("01:00,pcie=maybe", "invalid boolean"),
    ("01:00,mdev=a.b", "invalid mdev"),
    ("01:00,vendor-id=10de0", "invalid vendor-id"),
    ("01:00,driver=nvidia", "invalid driver"),
    ("mapping=9gpu", "invalid mapping id"),
    ("01:00,pcie=1,pcie=0", "duplicate"),
    ("zz:00", "invalid PCI address"),
    (" pcie=1,01:00", "unknown hostpci property ' pcie'"),  # PVE does not strip keys either
    ("host=01:00,02:00", "duplicate"),
])
def test_hostpci_invalid(bad, msg):
    with pytest.raises(PciError, match=msg):
        property_strings.normalize_hostpci(bad)


def test_hostpci_key_of_a_kind_without_a_branch_is_refused(monkeypatch):
    # A key added to HOSTPCI_KEYS (qemu-server grows new ones) with a kind _norm_value has no branch for must fail by
    # name, not pass its value through unchecked.
    monkeypatch.setitem(property_strings.HOSTPCI_KEYS, "x-new", ("newkind", None))
    for entry in ({"host": "01:00", "x-new": "1"}, "01:00,x-new=1"):
        with pytest.raises(PciError) as err:
            property_strings.normalize_hostpci(entry)
        assert str(err.value) == "unknown key 'x-new'"


def test_map_entry_normalisation():
    a = property_strings.normalize_map_entry("node=pve1,path=0000:01:00.0,id=10DE:20B5,subsystem-id=10de:1533,iommugroup=012")
    b = property_strings.normalize_map_entry({"iommugroup": 12, "id": "0x10de:0x20b5", "node": "pve1", "path": "01:00.0",
                                              "subsystem-id": "10de:1533"})
    assert a == b
    assert property_strings.format_map_entry(a) == "id=10de:20b5,iommugroup=12,node=pve1,path=0000:01:00.0,subsystem-id=10de:1533"
    # the formatted string parses back to the same entry
    assert property_strings.normalize_map_entry(property_strings.format_map_entry(a)) == a


def test_map_entry_description_with_comma_is_refused_not_quoted():
    # issue 14: PVE has no quoting, a quoted value would be split; the old code wrote description="slot 1, left".
    with pytest.raises(PciError, match="contains a comma"):
        property_strings.normalize_map_entry({"node": "n1", "path": "0000:01:00", "id": "10de:20b5", "description": "slot 1, left"})
    e = property_strings.normalize_map_entry({"node": "n1", "path": "0000:01:00", "id": "10de:20b5", "description": 'slot "1" left'})
    assert property_strings.format_map_entry(e) == 'description=slot "1" left,id=10de:20b5,node=n1,path=0000:01:00'
    assert property_strings.normalize_map_entry(property_strings.format_map_entry(e)) == e


def test_hostpci_romfile_with_comma_or_path_is_refused():
    with pytest.raises(PciError, match="invalid romfile"):
        property_strings.normalize_hostpci({"host": "01:00.0", "romfile": "a,b.rom"})
    for bad in ("../../etc/shadow", "/root/vbios.rom", "sub/vbios.rom", "..", "vbios.rom\n", "my rom.bin"):
        with pytest.raises(PciError, match="invalid romfile"):
            property_strings.normalize_hostpci({"host": "01:00.0", "romfile": bad})
    # what PVE itself stores is still read (lenient for server strings), so no existing config is refused
    assert property_strings.normalize_hostpci("01:00.0,romfile=/root/my rom.bin")["romfile"] == "/root/my rom.bin"
    assert property_strings.normalize_hostpci({"host": "01:00.0", "romfile": "vbios..rom"})["romfile"] == "vbios..rom"


@pytest.mark.parametrize("bad,msg", [
    ("node=pve1,path=0000:01:00.0", "lacks required property 'id'"),
    ("node=pve1,id=10de:20b5", "lacks required property 'path'"),
    ("node=pve1,path=0000:01:00.0,id=10de", "invalid id"),
    ("node=pve1,path=0000:01:00.0,id=10de:20b5,color=red", "unknown mapping property"),
    ("node=pve1,path=0000:01:00.0,id=10de:20b5,iommugroup=x", "invalid iommugroup"),
    # issue 14: refused rather than repaired
    ("node=pve1,path=0000:01:00.0,id=10de:20b5,iommugroup= 12", "invalid iommugroup"),
    ("node=pve1,path=0000:01:00.0,id=10de:20b5,iommugroup=1.5", "invalid iommugroup"),
    ("node=pve_1,path=0000:01:00.0,id=10de:20b5", "invalid node name"),
    ("node=-pve1,path=0000:01:00.0,id=10de:20b5", "invalid node name"),
    ("node=pve1\n,path=0000:01:00.0,id=10de:20b5", "invalid node name"),
    ("node=pve1,path=01:00:00,id=10de:20b5", "invalid PCI address"),
    ("node=pve1,path=0000:01:00.0;,id=10de:20b5", "empty function address"),
    ("node=pve1,path=0000:01:00.0,id=10de:20b", "invalid id"),
    ("node=pve1,node=pve2,path=0000:01:00.0,id=10de:20b5", "duplicate key"),
])
def test_map_entry_invalid(bad, msg):
    with pytest.raises(PciError, match=msg):
        property_strings.normalize_map_entry(bad)


def test_map_entry_description_length_and_line_breaks():
    base = {"node": "pve1", "path": "01:00.0", "id": "10de:20b5"}
    assert property_strings.normalize_map_entry(dict(base, description="x" * 4096))["description"] == "x" * 4096
    with pytest.raises(PciError, match="4097 characters long, Proxmox VE allows 4096"):
        property_strings.normalize_map_entry(dict(base, description="x" * 4097))
    with pytest.raises(PciError, match="line break"):
        property_strings.normalize_map_entry(dict(base, description="left slot\n"))


def test_map_list_order_across_nodes_ignored_within_node_kept():
    a = ["node=b,path=0000:02:00.0,id=10de:0001", "node=a,path=0000:01:00.4,id=10de:0001",
         "node=a,path=0000:01:00.5,id=10de:0001"]
    b = [a[1], a[2], a[0]]
    c = [a[2], a[1], a[0]]
    assert property_strings.normalize_map_list(a) == property_strings.normalize_map_list(b)
    assert property_strings.normalize_map_list(a) != property_strings.normalize_map_list(c)


# ----------------------------------------------------------------------------- planner

def test_plan_idempotent_with_equivalent_strings():
    current = {0: "0000:01:00,pcie=on,x-vga=1", 1: "mapping=gpu2,rombar=1"}
    plan = property_strings.plan_hostpci(current, [(None, "host=01:00,x-vga=1,pcie=1"), (None, {"mapping": "gpu2"})])
    assert plan["set"] == {} and plan["delete"] == []
    assert plan["keep"] == [0, 1]


def test_plan_replace_in_place_keeps_slot():
    plan = property_strings.plan_hostpci({4: "mapping=gpu1"}, [(None, "mapping=gpu1,pcie=1")])
    assert plan["set"] == {4: "mapping=gpu1,pcie=1"} and plan["delete"] == []


def test_plan_new_entry_takes_lowest_free_slot_and_exclusive_deletes():
    plan = property_strings.plan_hostpci({0: "mapping=old1", 2: "mapping=gpu1"}, [(None, "mapping=gpu1"), (None, "mapping=gpu2")])
    assert plan["set"] == {0: "mapping=gpu2"}
    assert plan["delete"] == []  # slot 0 is overwritten, not deleted
    assert plan["after"] == {0: "mapping=gpu2", 2: "mapping=gpu1"}
    plan = property_strings.plan_hostpci({5: "mapping=old1", 2: "mapping=gpu1"}, [(None, "mapping=gpu1"), (None, "mapping=gpu2")])
    assert plan["set"] == {0: "mapping=gpu2"} and plan["delete"] == [5]


def test_plan_non_exclusive_keeps_others_and_avoids_their_slots():
    plan = property_strings.plan_hostpci({0: "0000:05:00.0"}, [(None, "mapping=gpu1")], exclusive=False)
    assert plan["set"] == {1: "mapping=gpu1"} and plan["delete"] == []
    assert plan["after"] == {0: "0000:05:00.0", 1: "mapping=gpu1"}


def test_plan_explicit_slot_moves_device():
    plan = property_strings.plan_hostpci({0: "mapping=gpu1"}, [(3, "mapping=gpu1")])
    assert plan["set"] == {3: "mapping=gpu1"} and plan["delete"] == [0]


def test_plan_empty_removes_all():
    plan = property_strings.plan_hostpci({0: "mapping=gpu1", 7: "01:00"}, [])
    assert plan["set"] == {} and plan["delete"] == [0, 7] and plan["after"] == {}


def test_plan_errors():
    with pytest.raises(PciError, match="requested twice"):
        property_strings.plan_hostpci({}, [(1, "mapping=gpu1"), (1, "mapping=gpu2")])
    with pytest.raises(PciError, match="same device"):
        property_strings.plan_hostpci({}, [(None, "mapping=gpu1"), (None, "mapping=gpu1,pcie=1")])
    with pytest.raises(PciError, match="out of range"):
        property_strings.plan_hostpci({}, [(16, "mapping=gpu1")])
    with pytest.raises(PciError, match="no free hostpci slot"):
        property_strings.plan_hostpci({}, [(None, "mapping=g%02d" % i) for i in range(17)])


def test_hostpci_from_config_ignores_other_keys():
    cfg = {"hostpci0": "01:00,pcie=1", "hostpci12": "mapping=gpu1", "net0": "virtio", "hostpcix": "junk"}
    assert sorted(property_strings.hostpci_from_config(cfg)) == [0, 12]


# ----------------------------------------------------------------------------- hardware facts

def _dev(id_, cls, group, vendor="0x10de", device="0x20b5", **kw):
    d = {"id": id_, "class": cls, "vendor": vendor, "device": device, "iommugroup": group,
         "subsystem_vendor": "0x10de", "subsystem_device": "0x1533"}
    d.update(kw)
    return d


HW = [
    _dev("0000:00:01.0", "0x060400", 1, vendor="0x8086", device="0x1901"),   # root port in group 1
    _dev("0000:01:00.0", "0x030200", 1, mdev=1, nvidia=1, virtfns={"virtfn0": "0000:01:00.4", "virtfn1": "0000:01:00.5"}),
    _dev("0000:01:00.1", "0x040300", 1, device="0x10f0"),                    # HDMI audio, same device
    _dev("0000:01:00.4", "0x030200", 20, device="0x20b6", physfn="0000:01:00.0", mdev=1),
    _dev("0000:01:00.5", "0x030200", 21, device="0x20b6", physfn="0000:01:00.0", mdev=1),
    _dev("0000:02:00.0", "0x030000", 2, device="0x2204"),
    _dev("0000:02:00.1", "0x040300", 2, device="0x1aef"),
    _dev("0000:03:00.0", "0x020000", 2, vendor="0x8086", device="0x1533"),  # NIC sharing group 2
]


def test_device_facts_fields():
    d = property_strings.device_facts(HW[1])
    assert d["pci_id"] == "10de:20b5" and d["subsystem_id"] == "10de:1533"
    assert d["mdev"] is True and d["driver"] == "nvidia"
    assert d["virtfns"] == ["0000:01:00.4", "0000:01:00.5"]


def test_iommu_isolation_bridges_and_own_functions_ok_foreign_not():
    devices = [property_strings.device_facts(d) for d in HW]
    ok, members = property_strings.iommu_isolation(devices, "0000:01:00.0")
    assert ok and members == ["0000:00:01.0", "0000:01:00.0", "0000:01:00.1"]
    ok, members = property_strings.iommu_isolation(devices, "0000:02:00.0")
    assert not ok and "0000:03:00.0" in members
    assert property_strings.iommu_isolation([property_strings.device_facts(_dev("0000:09:00.0", "0x030000", -1))], "0000:09:00.0") == (False, [])


def test_gpu_facts_functions_vfs_mappings_usage():
    mappings = [{"id": "a100", "map": ["node=pve1,path=0000:01:00.0,id=10de:20b5"]},
                {"id": "vfpool", "map": ["node=pve1,path=0000:01:00.4;0000:01:00.5,id=10de:20b6",
                                         "node=pve2,path=0000:01:00.4,id=10de:20b6"]}]
    configs = {100: {"hostpci0": "mapping=a100,pcie=1"}, 101: {"hostpci1": "02:00"}, 102: {"net0": "x"}}
    gpus = property_strings.gpu_facts("pve1", HW, mdev_types={"0000:01:00.4": [{"type": "nvidia-1"}]}, mappings=mappings, vm_configs=configs)
    assert [g["id"] for g in gpus] == ["0000:01:00.0", "0000:02:00.0"]  # VFs are not top-level GPUs
    a100, rtx = gpus
    assert a100["functions"] == ["0000:01:00.0", "0000:01:00.1"]
    assert a100["mappings"] == ["a100"] and a100["iommu_isolated"]
    assert [v["id"] for v in a100["vfs"]] == ["0000:01:00.4", "0000:01:00.5"]
    assert a100["vfs"][0]["mappings"] == ["vfpool"] and a100["vfs"][0]["mdev_types"] == [{"type": "nvidia-1"}]
    assert a100["used_by"] == [{"vmid": 100, "slot": "hostpci0", "via": "mapping", "mapping": "a100",
                                "paths": ["0000:01:00.0"], "mdev": None}]
    assert rtx["used_by"][0]["vmid"] == 101 and not rtx["iommu_isolated"]


def test_check_map_entry():
    devices = [property_strings.device_facts(d) for d in HW]
    good = property_strings.normalize_map_entry("node=pve1,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de:1533,iommugroup=1")
    assert property_strings.check_map_entry(good, devices) == []
    whole = property_strings.normalize_map_entry("node=pve1,path=0000:01:00,id=10de:20b5,subsystem-id=10de:1533,iommugroup=1")
    assert property_strings.check_map_entry(whole, devices) == []
    wrong = property_strings.normalize_map_entry("node=pve1,path=0000:01:00.0,id=10de:2330,subsystem-id=10de:1533,iommugroup=7")
    problems = property_strings.check_map_entry(wrong, devices)
    assert any("'id' does not match" in p and "10de:20b5 != 10de:2330" in p for p in problems)
    assert any("'iommugroup' does not match" in p for p in problems)
    missing_sub = property_strings.normalize_map_entry("node=pve1,path=0000:01:00.0,id=10de:20b5,iommugroup=1")
    assert any("missing expected property 'subsystem-id'" in p for p in property_strings.check_map_entry(missing_sub, devices))
    absent = property_strings.normalize_map_entry("node=pve1,path=0000:07:00.0,id=10de:20b5")
    assert property_strings.check_map_entry(absent, devices) == ["pci device '0000:07:00.0' not found"]


def test_check_map_entry_iommugroup_both_ways_first_path_only():
    # issue 14 point 1: PVE::Mapping::PCI::assert_valid expects the group whenever the hardware has one.
    devices = [property_strings.device_facts(d) for d in HW]
    no_group = property_strings.normalize_map_entry("node=pve1,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de:1533")
    assert property_strings.check_map_entry(no_group, devices) == [
        "missing expected property 'iommugroup' for device '0000:01:00.0' (hardware has 1)"]
    no_iommu = [dict(d, iommu_group=-1) for d in devices]
    with_group = property_strings.normalize_map_entry("node=pve1,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de:1533,iommugroup=1")
    assert property_strings.check_map_entry(with_group, no_iommu) == [
        "unexpected property 'iommugroup' configured for device '0000:01:00.0' (hardware has none)"]
    # the group of later alternatives is not checked (idx > 0 in assert_valid)
    pool = property_strings.normalize_map_entry("node=pve1,path=0000:01:00.0;0000:02:00.0,id=10de:20b5,iommugroup=1")
    assert not any("iommugroup" in p for p in property_strings.check_map_entry(pool, devices))


def test_check_map_entry_mdev_both_ways():
    # issue 14 point 2: PVE 8.4+ compares the mapping's mdev flag with the device, in both directions.
    devices = [property_strings.device_facts(d) for d in HW]
    entry = property_strings.map_entry_from_device("pve1", property_strings.device_facts(HW[1]))  # HW[1] has the nvidia/ sysfs interface
    assert property_strings.check_map_entry(entry, devices, mdev=True) == []
    assert property_strings.check_map_entry(entry, devices) == []  # no flag given: not compared (PVE before 8.4)
    assert property_strings.check_map_entry(entry, devices, mdev=False) == [
        "'mdev' does not match for '0000:01:00.0': the mapping says no mdev, the device provides mediated devices"]
    plain = [dict(d, mdev=False) for d in devices]
    assert property_strings.check_map_entry(entry, plain, mdev=True) == [
        "'mdev' does not match for '0000:01:00.0': the mapping says mdev, the device cannot provide mediated devices"]
    capable = [dict(d, mdev=True) for d in devices]
    assert property_strings.mdev_capability(capable) is True and property_strings.mdev_capability(plain) is False
    assert property_strings.mdev_capability([capable[0], plain[0]]) is None


def test_map_entry_from_device():
    dev = property_strings.device_facts(HW[1])
    e = property_strings.map_entry_from_device("pve1", dev)
    assert property_strings.format_map_entry(e) == "id=10de:20b5,iommugroup=1,node=pve1,path=0000:01:00.0,subsystem-id=10de:1533"
    e = property_strings.map_entry_from_device("pve1", dev, whole_device=True)
    assert property_strings.format_map_entry(e) == "id=10de:20b5,iommugroup=1,node=pve1,path=0000:01:00,subsystem-id=10de:1533"
    e = property_strings.map_entry_from_device("pve1", dict(dev, iommu_group=-1, subsystem_id=None))
    assert property_strings.format_map_entry(e) == "id=10de:20b5,node=pve1,path=0000:01:00.0"


def test_subsystem_zero_is_kept_as_assert_valid_expects_it():
    d = property_strings.device_facts({"id": "0000:05:00.0", "class": "0x030000", "vendor": "0x10de", "device": "0x1eb8",
                                       "subsystem_vendor": "0x0000", "subsystem_device": "0x0000", "iommugroup": 5})
    assert d["subsystem_id"] == "0000:0000"


@pytest.mark.parametrize("version,option,ok", [
    ((8, 3, 5), "live-migration-capable", False), ((8, 4, 0), "live-migration-capable", True),
    ((9, 0, 3), "driver", False), ((9, 1, 1), "driver", True), (None, "driver", True)])
def test_version_gate(version, option, ok):
    msg = property_strings.version_gate(option, version)
    assert (msg is None) == ok
    if not ok:
        assert "needs Proxmox VE" in msg and ".".join(map(str, version)) in msg


def test_parse_pve_version():
    assert property_strings.parse_pve_version("8.4.1") == (8, 4, 1)
    assert property_strings.parse_pve_version("9.0") == (9, 0, 0)
    assert property_strings.parse_pve_version(None) is None


def test_permission_problems_mirror_check_hostpci_perm():
    # issue 14 point 6: raw host= and romfile are root@pam's alone, for the new value, the replaced and the deleted one.
    current = {0: property_strings.normalize_hostpci("0000:01:00.0,pcie=1"), 1: property_strings.normalize_hostpci("mapping=ga,romfile=v.rom"),
               2: property_strings.normalize_hostpci("mapping=gb")}
    plan = {"set": {0: "mapping=a100", 2: "mapping=gb,romfile=x.rom", 3: "0000:02:00.0"}, "delete": [1]}
    problems = property_strings.permission_problems(plan, current, is_root=False)
    assert problems == [
        "hostpci0: replacing the existing entry has a raw host device 0000:01:00.0",
        "hostpci1: deleting the existing entry has a romfile v.rom",
        "hostpci2: the new entry has a romfile x.rom",
        "hostpci3: the new entry has a raw host device 0000:02:00.0",
    ]
    assert property_strings.permission_problems(plan, current, is_root=True) == []
    assert property_strings.permission_problems({"set": {2: "mapping=gc"}, "delete": []}, current, is_root=False) == []


# ----------------------------------------------------------------------------- what mutation testing found unpinned

@pytest.mark.parametrize("text,parts", [
    ("ABCD:0A:1F.7", ("abcd", "0a", "1f", "7")),
    ("12345678:01:00.0", ("12345678", "01", "00", "0")),
    ("0001:1:2", ("0001", "01", "02", None)),
    ("00:00.0", ("0000", "00", "00", "0")),
])
def test_parse_pci_address_fields(text, parts):
    assert property_strings.parse_pci_address(text) == parts


@pytest.mark.parametrize("bad", ["123456789:01:00.0", "123:01:00.0", "01:00.8", "001:00.0", "01:000.0"])
def test_parse_pci_address_bounds_message(bad):
    with pytest.raises(PciError, match=r"^invalid PCI address %r \(expected \[dddd:\]bb:dd\[\.f\], a domain has four digits\)$"
                       % bad):
        property_strings.parse_pci_address(bad)


@pytest.mark.parametrize("bad", [None, 1, b"01:00.0"])
def test_parse_pci_address_not_a_string(bad):
    with pytest.raises(PciError, match=r"^PCI address must be a string, got %s$" % re.escape(repr(bad))):
        property_strings.parse_pci_address(bad)


def test_normalize_pci_address_function_zero_and_int():
    assert property_strings.normalize_pci_address("01:00", function=0) == "0000:01:00.0"
    assert property_strings.normalize_pci_address("01:00", function=3) == "0000:01:00.3"
    assert property_strings.normalize_pci_address("01:00") == "0000:01:00"
    assert property_strings.pci_slot("abcd:1:2") == "abcd:01:02"


@pytest.mark.parametrize("path,device,covered", [
    ("01:00", "0000:01:00", True),          # both without function
    ("01:00.0", "0000:01:00", True),        # a device without function is function 0
    ("01:00.1", "0000:01:00", False),
    ("0001:01:00", "0000:01:00.0", False),  # domain, bus and device all count
    ("02:00", "0000:01:00.0", False),
    ("01:01", "0000:01:00.0", False),
    ("01:00.3", "0000:01:00.3", True),
])
def test_address_covers_each_field(path, device, covered):
    assert property_strings.address_covers(path, device) is covered


def test_normalize_hex_id_forms_and_messages():
    assert property_strings.normalize_hex_id(0) == "0000"
    assert property_strings.normalize_hex_id("0xABCD") == "abcd"
    with pytest.raises(PciError, match=r"^invalid id None \(expected four hex digits, optionally with 0x\)$"):
        property_strings.normalize_hex_id(None)
    with pytest.raises(PciError, match=r"^invalid vendor-id '10de0' \(expected four hex digits, optionally with 0x\)$"):
        property_strings.normalize_hex_id("10de0", "vendor-id")
    with pytest.raises(PciError, match=r"^invalid id 'x10de'"):
        property_strings.normalize_hex_id("x10de")


@pytest.mark.parametrize("bad", ["10de", "10de:20b", 42, "10de:20b0:1", None])
def test_normalize_pci_id_message(bad):
    with pytest.raises(PciError, match=r"^invalid vendor:device id %s \(expected vvvv:dddd\)$" % re.escape(repr(bad))):
        property_strings.normalize_pci_id(bad)
    with pytest.raises(PciError, match=r"^invalid subsystem-id %s \(expected vvvv:dddd\)$" % re.escape(repr(bad))):
        property_strings.normalize_pci_id(bad, "subsystem-id")


@pytest.mark.parametrize("text,ok", [("a1", True), ("ab", True), ("A-b_c9", True), ("a", False), ("1a", False),
                                     ("-ab", False), ("ab\n", False), ("a.b", False), (5, False), (None, False)])
def test_is_configid(text, ok):
    assert property_strings.is_configid(text) is ok


@pytest.mark.parametrize("text,ok", [("a", True), ("a-b", True), ("pve1", True), ("A9", True), ("a-", False), ("-a", False),
                                     ("a_b", False), ("", False), ("a\n", False), (5, False)])
def test_is_node_name(text, ok):
    assert property_strings.is_node_name(text) is ok


def test_parse_bool_forms_and_message():
    assert property_strings.parse_bool(" On ") == "1" and property_strings.parse_bool("FALSE") == "0"
    assert property_strings.parse_bool(1) == "1" and property_strings.parse_bool(0) == "0"
    with pytest.raises(PciError, match=r"^invalid boolean 2 for value$"):
        property_strings.parse_bool(2)
    with pytest.raises(PciError, match=r"^invalid boolean 'maybe' for pcie$"):
        property_strings.parse_bool("maybe", "pcie")


def test_split_property_string_values_and_messages():
    # everything after the first '=' is the value, line breaks and backslashes included; keys are not stripped
    assert property_strings.split_property_string("description=a=b") == [("description", "a=b")]
    assert property_strings.split_property_string("x=a\nb") == [("x", "a\nb")]
    assert property_strings.split_property_string(r"x=a\,y=\b") == [("x", "a\\"), ("y", "\\b")]
    assert property_strings.split_property_string(" k =v") == [(" k ", "v")]
    assert property_strings.split_property_string("") == []
    with pytest.raises(PciError, match=r"^property string must be a string, got None$"):
        property_strings.split_property_string(None)
    with pytest.raises(PciError, match=r"^missing key or value in 'pcie=' of property string '01:00,pcie='$"):
        property_strings.split_property_string("01:00,pcie=")
    with pytest.raises(PciError, match=r"^duplicate key 'pcie' in property string '01:00,pcie=1,pcie=0'$"):
        property_strings.split_property_string("01:00,pcie=1,pcie=0")
    with pytest.raises(PciError, match=r"^duplicate key '\(default\)' in property string '01:00,02:00'$"):
        property_strings.split_property_string("01:00,02:00")


@pytest.mark.parametrize("norm,msg", [
    ({"mapping": "a", "romfile": "x,y"}, r"^romfile 'x,y' contains a comma, which Proxmox VE property strings cannot hold$"),
    ({"mapping": "a", "mdev": "x\ny"}, r"^mdev 'x\\ny' contains a line break, which Proxmox VE config files cannot hold$"),
    ({"mapping": "a", "mdev": "x\ry"}, r"^mdev 'x\\ry' contains a line break"),
])
def test_format_hostpci_refuses_what_pve_cannot_store(norm, msg):
    with pytest.raises(PciError, match=msg):
        property_strings.format_hostpci(norm)


@pytest.mark.parametrize("entry,msg", [
    ("host=;", r"^empty host PCI address$"),
    ("host= ; ", r"^empty host PCI address$"),
    ("mapping=9gpu", r"^invalid mapping id '9gpu' \(expected \[a-z\]\[a-z0-9_-\]\+\)$"),
    ("mapping=g", r"^invalid mapping id 'g'"),
    ("01:00,mdev=a/b", r"^invalid mdev type 'a/b' \(no '/', '\.', ':', comma or white space allowed\)$"),
    ("01:00,romfile=a;b", r"^invalid romfile 'a;b'$"),
    ("01:00,driver=nvidia", r"^invalid driver 'nvidia' \(expected vfio or keep\)$"),
    ("01:00,foo=1", r"^unknown hostpci property 'foo'$"),
    ("01:00,host=02:00", r"^duplicate hostpci property 'host'$"),
    ("01:00,vendor-id=10de0", r"^invalid vendor-id '10de0' \(expected four hex digits"),
    ("01:00,pcie=maybe", r"^invalid boolean 'maybe' for pcie$"),
    ("mapping=gpu1,host=01:00", r"^Cannot set both 'host' and 'mapping'\.$"),
    ("pcie=1", r"^Either 'host' or 'mapping' must be set\.$"),
    ({"host": "01:00", "mdev": "nvidia 1"}, r"^invalid mdev type 'nvidia 1'"),
    ({"host": "01:00", "romfile": "."}, r"^invalid romfile '\.': give a file name in /usr/share/kvm/ \(no '/', ';', comma or white space\)$"),
    ({"host": "01:00", "pcie": None}, None),
])
def test_normalize_hostpci_messages(entry, msg):
    if msg is None:
        assert property_strings.normalize_hostpci(entry) == {"host": "0000:01:00"}
        return
    with pytest.raises(PciError, match=msg):
        property_strings.normalize_hostpci(entry)


def test_normalize_hostpci_strictness_follows_the_input_kind_unless_given():
    assert property_strings.normalize_hostpci("01:00,mdev=nvidia 1") == {"host": "0000:01:00", "mdev": "nvidia 1"}
    with pytest.raises(PciError, match="invalid mdev type 'nvidia 1'"):
        property_strings.normalize_hostpci("01:00,mdev=nvidia 1", strict=True)
    assert property_strings.normalize_hostpci({"host": "01:00", "mdev": "nvidia 1"}, strict=False)["mdev"] == "nvidia 1"
    assert property_strings.normalize_hostpci({"host": "01:00", "romfile": ".."}, strict=False)["romfile"] == ".."


def test_normalize_hostpci_every_key():
    norm = property_strings.normalize_hostpci("host=01:00.0; ;02:00.0,pcie=1,x-vga=1,rombar=0,romfile=v.rom,mdev=nvidia-1,legacy-igd=1,"
                                              "vendor-id=10DE,device-id=0x20B5,sub-vendor-id=10de,sub-device-id=1533,driver=keep")
    assert norm == {"host": "0000:01:00.0;0000:02:00.0", "pcie": "1", "x-vga": "1", "rombar": "0", "romfile": "v.rom",
                    "mdev": "nvidia-1", "legacy-igd": "1", "vendor-id": "0x10de", "device-id": "0x20b5",
                    "sub-vendor-id": "0x10de", "sub-device-id": "0x1533", "driver": "keep"}
    assert property_strings.format_hostpci(norm) == (
        "0000:01:00.0;0000:02:00.0,device-id=0x20b5,driver=keep,legacy-igd=1,mdev=nvidia-1,pcie=1,rombar=0,romfile=v.rom,"
        "sub-device-id=0x1533,sub-vendor-id=0x10de,vendor-id=0x10de,x-vga=1")
    assert property_strings.normalize_hostpci("mapping=gpu1,rombar=1,driver=vfio,pcie=0") == {"mapping": "gpu1"}
    assert property_strings.hostpci_device_key(norm) == ("host", "0000:01:00.0;0000:02:00.0")
    assert property_strings.hostpci_device_key({"mapping": "g1", "host": "x"}) == ("mapping", "g1")


@pytest.mark.parametrize("entry,msg", [
    ("pve1,path=0000:01:00.0,id=10de:20b5", r"^unknown mapping property None in 'pve1,path=0000:01:00\.0,id=10de:20b5'$"),
    ("node=pve1,path=0000:01:00.0,id=10de:20b5,color=red", r"^unknown mapping property 'color' in 'node=pve1,"),
    ("node=pve1,path=0000:01:00.0;,id=10de:20b5", r"^invalid mapping path '0000:01:00\.0;' \(empty function address\)$"),
    ("node=pve1,path=;0000:01:00.0,id=10de:20b5", r"^invalid mapping path ';0000:01:00\.0' \(empty function address\)$"),
    ("node=pve1,path=0000:01:00.0,id=10de:20b5,iommugroup=x", r"^invalid iommugroup 'x' \(expected a number\)$"),
    ({"node": "pve1", "path": "01:00.0", "id": "10de:20b5", "iommugroup": True}, r"^invalid iommugroup True \(expected a number\)$"),
    ("node=pve_1,path=0000:01:00.0,id=10de:20b5", r"^invalid node name 'pve_1' \(letters, digits and inner '-' only\)$"),
    ({"node": 5, "path": "01:00.0", "id": "10de:20b5"}, r"^invalid node name 5 "),
    ("node=pve1,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de", r"^invalid subsystem-id '10de' \(expected vvvv:dddd\)$"),
    ("node=pve1,path=0000:01:00.0", r"^mapping entry 'node=pve1,path=0000:01:00\.0' lacks required property 'id'$"),
    ({"path": "01:00.0", "id": "10de:20b5"}, r"lacks required property 'node'$"),
    ({"node": "pve1", "path": "", "id": "10de:20b5"}, r"lacks required property 'path'$"),
])
def test_map_entry_messages(entry, msg):
    with pytest.raises(PciError, match=msg):
        property_strings.normalize_map_entry(entry)


@pytest.mark.parametrize("group,expected", [("0", "0"), (0, "0"), ("+12", "12"), ("-1", "-1"), ("007", "7")])
def test_map_entry_iommugroup_forms(group, expected):
    e = property_strings.normalize_map_entry({"node": "pve1", "path": "01:00.0", "id": "10de:20b5", "iommugroup": group})
    assert e == {"node": "pve1", "path": "0000:01:00.0", "id": "10de:20b5", "iommugroup": expected}


def test_map_entry_description_limit_message_and_format():
    base = {"node": "pve1", "path": "01:00.0", "id": "10de:20b5"}
    with pytest.raises(PciError, match=r"^description of node entry is 4097 characters long, Proxmox VE allows 4096$"):
        property_strings.normalize_map_entry(dict(base, description="x" * 4097))
    with pytest.raises(PciError, match=r"^description 'a,b' contains a comma"):
        property_strings.normalize_map_entry(dict(base, description="a,b"))
    with pytest.raises(PciError, match=r"^path 'a,b' contains a comma"):
        property_strings.format_map_entry({"path": "a,b"})
    assert property_strings.normalize_map_list(None) == [] and property_strings.normalize_map_list([]) == []


@pytest.mark.parametrize("cfg,slots", [
    (None, []), ({}, []), ({"xhostpci0": "01:00", "hostpci0x": "01:00", "hostpci": "01:00"}, []),
    ({"hostpci3": "01:00", "hostpci10": "mapping=gpu1"}, [3, 10]),
])
def test_hostpci_from_config_keys(cfg, slots):
    found = property_strings.hostpci_from_config(cfg)
    assert sorted(found) == slots
    for slot in slots:
        assert found[slot] == property_strings.normalize_hostpci(cfg["hostpci%d" % slot])


def test_plan_kept_slot_that_is_also_the_lowest_free_one():
    # gpu1 keeps slot 0; gpu2 must not be put on top of it
    plan = property_strings.plan_hostpci({0: "mapping=gpu1"}, [(None, "mapping=gpu1"), (None, "mapping=gpu2")])
    assert plan == {"before": {0: "mapping=gpu1"}, "after": {0: "mapping=gpu1", 1: "mapping=gpu2"},
                    "set": {1: "mapping=gpu2"}, "delete": [], "keep": [0],
                    "desired": {0: "mapping=gpu1", 1: "mapping=gpu2"}}


def test_plan_replaced_slot_is_taken_too():
    plan = property_strings.plan_hostpci({0: "mapping=gpu1"}, [(None, "mapping=gpu1,pcie=1"), (None, "mapping=gpu2")])
    assert plan == {"before": {0: "mapping=gpu1"}, "after": {0: "mapping=gpu1,pcie=1", 1: "mapping=gpu2"},
                    "set": {0: "mapping=gpu1,pcie=1", 1: "mapping=gpu2"}, "delete": [], "keep": [],
                    "desired": {0: "mapping=gpu1,pcie=1", 1: "mapping=gpu2"}}


def test_plan_same_device_in_two_slots_lowest_wins():
    current = {3: "mapping=gpu1,x-vga=1", 1: "mapping=gpu1,pcie=1"}
    plan = property_strings.plan_hostpci(current, [(None, "mapping=gpu1")])
    assert plan["set"] == {1: "mapping=gpu1"} and plan["delete"] == [3] and plan["keep"] == []
    plan = property_strings.plan_hostpci({3: "mapping=gpu1", 1: "mapping=gpu1"}, [(None, "mapping=gpu1,pcie=1")])
    assert plan["set"] == {1: "mapping=gpu1,pcie=1"} and plan["delete"] == [3]


def test_plan_explicit_slot_wins_over_an_exact_match():
    plan = property_strings.plan_hostpci({0: "mapping=gpu1"}, [(0, "mapping=gpu2"), (None, "mapping=gpu1")])
    assert plan["set"] == {0: "mapping=gpu2", 1: "mapping=gpu1"} and plan["keep"] == [] and plan["delete"] == []
    plan = property_strings.plan_hostpci({0: "mapping=gpu1"}, [("0", "mapping=gpu1")])
    assert plan["set"] == {} and plan["keep"] == [0] and plan["desired"] == {0: "mapping=gpu1"}


def test_plan_current_as_normalised_dicts_and_non_exclusive_keep():
    plan = property_strings.plan_hostpci({0: {"host": "0000:05:00.0"}, 2: "mapping=gpu1"}, [], exclusive=False)
    assert plan == {"before": {0: "0000:05:00.0", 2: "mapping=gpu1"}, "after": {0: "0000:05:00.0", 2: "mapping=gpu1"},
                    "set": {}, "delete": [], "keep": [0, 2], "desired": {}}
    plan = property_strings.plan_hostpci(None, [(None, "01:00")])
    assert plan["set"] == {0: "0000:01:00"} and plan["before"] == {} and plan["keep"] == []


@pytest.mark.parametrize("slot", [-1, 16, "16"])
def test_plan_slot_range_message(slot):
    with pytest.raises(PciError, match=r"^hostpci slot %s out of range 0-15$" % slot):
        property_strings.plan_hostpci({}, [(slot, "mapping=gpu1")])


def test_plan_slot_bounds_and_limits():
    assert property_strings.plan_hostpci({}, [(15, "mapping=gpu1")])["set"] == {15: "mapping=gpu1"}
    assert property_strings.plan_hostpci({}, [(0, "mapping=gpu1")])["set"] == {0: "mapping=gpu1"}
    sixteen = property_strings.plan_hostpci({}, [(None, "mapping=g%02d" % i) for i in range(16)])
    assert sorted(sixteen["set"]) == list(range(16)) and sixteen["set"][15] == "mapping=g15"
    with pytest.raises(PciError, match=r"^no free hostpci slot \(at most 16 devices per VM\)$"):
        property_strings.plan_hostpci({}, [(None, "mapping=g%02d" % i) for i in range(17)])
    with pytest.raises(PciError, match=r"^no free hostpci slot"):
        property_strings.plan_hostpci({i: "mapping=o%02d" % i for i in range(16)}, [(None, "mapping=new")], exclusive=False)
    with pytest.raises(PciError, match=r"^the same hostpci slot is requested twice$"):
        property_strings.plan_hostpci({}, [(1, "mapping=gpu1"), ("1", "mapping=gpu2")])
    with pytest.raises(PciError, match=r"^the same device is requested twice: host=0000:01:00, mapping=gpu1$"):
        property_strings.plan_hostpci({}, [(None, "mapping=gpu1"), (None, "01:00"), (None, "mapping=gpu1,pcie=1"), (None, "host=01:00"),
                                           (None, "mapping=gpu2")])


def test_device_facts_full_record():
    dev = {"id": "0000:41:00.0", "class": "0x030200", "vendor": "0x10DE", "device": "0x2330", "subsystem_vendor": "0x10de",
           "subsystem_device": "0x16c1", "vendor_name": "NVIDIA", "device_name": "H100", "subsystem_device_name": "SXM5",
           "iommugroup": 0, "mdev": "1", "driver": "vfio-pci", "physfn": "41:00.0",
           "virtfns": {"a": "0000:41:01.0", "b": "0000:41:00.7"}}
    assert property_strings.device_facts(dev) == {
        "id": "0000:41:00.0", "slot": "0000:41:00", "class": "0x030200", "vendor_id": "10de", "device_id": "2330",
        "pci_id": "10de:2330", "subsystem_id": "10de:16c1", "vendor_name": "NVIDIA", "device_name": "H100",
        "subsystem_name": "SXM5", "iommu_group": 0, "mdev": True, "driver": "vfio-pci", "physfn": "0000:41:00.0",
        "virtfns": ["0000:41:00.7", "0000:41:01.0"]}
    bare = property_strings.device_facts({"id": "41:00.0", "vendor": "bad!", "device": None, "subsystem_vendor": "0x10de"})
    assert bare == {"id": "0000:41:00.0", "slot": "0000:41:00", "class": None, "vendor_id": None, "device_id": None,
                    "pci_id": None, "subsystem_id": None, "vendor_name": None, "device_name": None, "subsystem_name": None,
                    "iommu_group": -1, "mdev": False, "driver": None, "physfn": None, "virtfns": []}
    for group in ("x", None, "1.5"):
        assert property_strings.device_facts({"id": "41:00.0", "iommugroup": group})["iommu_group"] == -1
    half = property_strings.device_facts({"id": "41:00.0", "vendor": "10de", "subsystem_device": "0001", "nvidia": "0", "mdev": "0"})
    assert (half["pci_id"], half["subsystem_id"], half["mdev"], half["driver"]) == (None, None, False, None)


@pytest.mark.parametrize("cls,gpu,bridge", [
    ("0x030000", True, False), ("0x030200", True, False), ("0x038000", True, False), ("0X0300", True, False),
    ("0x030100", False, False), ("0x040300", False, False), ("0x060400", False, True), ("0X0604", False, True),
    (None, False, False), ("", False, False),
])
def test_device_classes(cls, gpu, bridge):
    assert property_strings.is_gpu_class(cls) is gpu and property_strings.is_bridge_class(cls) is bridge


def test_iommu_group_zero_is_a_group():
    devices = [property_strings.device_facts(_dev("0000:09:00.0", "0x030000", 0)), property_strings.device_facts(_dev("0000:09:00.1", "0x040300", 0))]
    assert property_strings.iommu_isolation(devices, "0000:09:00.0") == (True, ["0000:09:00.0", "0000:09:00.1"])
    assert property_strings.iommu_isolation(devices, "0000:0a:00.0") == (False, [])
    shared = devices + [property_strings.device_facts(_dev("0000:0b:00.0", "0x020000", 0))]
    assert property_strings.iommu_isolation(shared, "0000:09:00.0") == (False, ["0000:09:00.0", "0000:09:00.1", "0000:0b:00.0"])


def test_gpu_facts_full_record_and_defaults():
    gpus = property_strings.gpu_facts("pve1", [_dev("0000:09:00.0", "0x030000", 0), _dev("0000:09:00.1", "0x040300", 0)])
    assert gpus == [dict(property_strings.device_facts(_dev("0000:09:00.0", "0x030000", 0)), node="pve1",
                         functions=["0000:09:00.0", "0000:09:00.1"], iommu_isolated=True,
                         iommu_group_devices=["0000:09:00.0", "0000:09:00.1"], mdev_types=[], mappings=[], used_by=[],
                         vfs=[])]
    # a VF whose parent lists it but that is missing from the list is skipped; VFs are not functions of the parent
    gpus = property_strings.gpu_facts("pve1", HW[:4])
    assert [v["id"] for v in gpus[0]["vfs"]] == ["0000:01:00.4"] and gpus[0]["functions"] == ["0000:01:00.0", "0000:01:00.1"]


def test_mapping_refs_and_usage_edges():
    mappings = [{"id": "bad", "map": ["node=pve1,path=zz"]}, {"id": "none"}, {"id": "nomap", "map": None},
                {"id": "pool", "map": ["node=pve2,path=0000:01:00.0,id=10de:20b5", "node=pve1,path=0000:01:00.0;0000:02:00.0,id=10de:20b5"]}]
    assert property_strings.mapping_refs("pve1", mappings) == [("pool", "0000:01:00.0"), ("pool", "0000:02:00.0")]
    configs = {"10": {"hostpci1": "mapping=pool,mdev=nvidia-1", "hostpci0": "01:00.0;02:00.0"}, "9": {"hostpci0": "mapping=gone"},
               "11": {"hostpci0": "pcie=1"}}
    assert property_strings.hostpci_usage("pve1", mappings, configs) == [
        {"vmid": 9, "slot": "hostpci0", "via": "mapping", "mapping": "gone", "paths": [], "mdev": None},
        {"vmid": 10, "slot": "hostpci0", "via": "host", "mapping": None, "paths": ["0000:01:00.0", "0000:02:00.0"], "mdev": None},
        {"vmid": 10, "slot": "hostpci1", "via": "mapping", "mapping": "pool", "paths": ["0000:01:00.0", "0000:02:00.0"],
         "mdev": "nvidia-1"},
    ]


def test_check_map_entry_subsystem_branches_and_order():
    devices = [property_strings.device_facts(d) for d in HW]
    wrong = property_strings.normalize_map_entry("node=pve1,path=0000:01:00,id=10de:2330,subsystem-id=10de:9999,iommugroup=0")
    assert property_strings.check_map_entry(wrong, devices, mdev=False) == [
        "'id' does not match for '0000:01:00' (10de:20b5 != 10de:2330)",
        "'iommugroup' does not match for '0000:01:00' (1 != 0)",
        "'mdev' does not match for '0000:01:00': the mapping says no mdev, the device provides mediated devices",
        "'subsystem-id' does not match for '0000:01:00' (10de:1533 != 10de:9999)",
    ]
    no_sub = [dict(d, subsystem_id=None) for d in devices]
    entry = property_strings.normalize_map_entry("node=pve1,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de:1533,iommugroup=1")
    assert property_strings.check_map_entry(entry, no_sub) == [
        "unexpected property 'subsystem-id' configured for device '0000:01:00.0' (hardware has none)"]
    zero = [dict(d, iommu_group=0) for d in devices]
    assert property_strings.check_map_entry(dict(entry, iommugroup="0"), zero) == []
    assert property_strings.check_map_entry({"path": "0000:01:00.0"}, zero) == [
        "missing expected property 'id' for device '0000:01:00.0' (hardware has 10de:20b5)",
        "missing expected property 'iommugroup' for device '0000:01:00.0' (hardware has 0)",
        "missing expected property 'subsystem-id' for device '0000:01:00.0' (hardware has 10de:1533)"]
    # later alternatives: every property but the group is checked
    pool = property_strings.normalize_map_entry("node=pve1,path=0000:01:00.0;0000:02:00.0,id=10de:20b5,subsystem-id=10de:1533,iommugroup=1")
    assert property_strings.check_map_entry(pool, devices) == ["'id' does not match for '0000:02:00.0' (10de:2204 != 10de:20b5)"]
    assert property_strings.check_map_entry(pool, devices, mdev=False) == [
        "'mdev' does not match for '0000:01:00.0': the mapping says no mdev, the device provides mediated devices",
        "'id' does not match for '0000:02:00.0' (10de:2204 != 10de:20b5)"]


def test_map_entry_from_device_group_zero_and_mdev_capability_empty():
    dev = dict(property_strings.device_facts(HW[1]), iommu_group=0)
    assert property_strings.map_entry_from_device("pve1", dev) == {"node": "pve1", "path": "0000:01:00.0", "id": "10de:20b5",
                                                                   "subsystem-id": "10de:1533", "iommugroup": "0"}
    assert property_strings.map_entry_from_device("pve1", {"slot": "0000:01:00", "id": "0000:01:00.0", "pci_id": "10de:20b5"}) == {
        "node": "pve1", "path": "0000:01:00.0", "id": "10de:20b5"}
    assert property_strings.mdev_capability([]) is None
    assert property_strings.mdev_capability([{"mdev": 0}, {}]) is False


@pytest.mark.parametrize("version,option,msg", [
    ((9, 0, 3), "driver", "'driver' needs Proxmox VE 9.1 or newer (qemu-server 9.0.25, commit aa47045f 'pci: add driver "
                          "option'); the server runs 9.0.3"),
    ((8, 3), "live-migration-capable", "'live-migration-capable' needs Proxmox VE 8.4 or newer (libpve-guest-common-perl "
                                       "5.1.7, pve-guest-common commit ef051db 'mapping: pci: add live-migration-capable "
                                       "flag'); the server runs 8.3"),
    ((9, 1), "driver", None), ((9, 1, 0), "driver", None), ((10, 0, 0), "driver", None), ((8, 9, 9), "driver", "9.1"),
])
def test_version_gate_messages_and_bounds(version, option, msg):
    got = property_strings.version_gate(option, version)
    if msg is None:
        assert got is None
    else:
        assert got is not None and (got == msg if len(msg) > 3 else msg in got)


@pytest.mark.parametrize("text,version", [("9.0.0~11", (9, 0, 0)), ("10.12", (10, 12, 0)), ("8.4.1-pve", (8, 4, 1)),
                                          ("abc", None), ("", None), ("9", None), (8.4, (8, 4, 0))])
def test_parse_pve_version_forms(text, version):
    assert property_strings.parse_pve_version(text) == version


def test_root_only_reasons_and_string_current():
    reasons = property_strings.root_only_reasons({"host": "0000:01:00.0", "romfile": "v.rom"})
    assert reasons == ["raw host device 0000:01:00.0", "romfile v.rom"]
    assert property_strings.root_only_reasons({"mapping": "a"}) == []
    plan = {"set": {1: "mapping=ga"}, "delete": [0]}
    assert property_strings.permission_problems(plan, {0: "0000:01:00.0", 1: "mapping=gb,romfile=r.rom"}, is_root=False) == [
        "hostpci0: deleting the existing entry has a raw host device 0000:01:00.0",
        "hostpci1: replacing the existing entry has a romfile r.rom"]


def test_permission_problems_take_a_stored_entry_as_it_is():
    # a current entry already normalised from the server (lenient: a romfile path) is not re-checked strictly
    stored = property_strings.normalize_hostpci("0000:01:00.0,romfile=/root/v.rom")
    assert property_strings.permission_problems({"set": {}, "delete": [0]}, {0: stored}, is_root=False) == [
        "hostpci0: deleting the existing entry has a raw host device 0000:01:00.0",
        "hostpci0: deleting the existing entry has a romfile /root/v.rom"]


def test_plan_takes_stored_current_entries_as_they_are():
    stored = property_strings.normalize_hostpci("0000:01:00.0,romfile=/root/v.rom")
    plan = property_strings.plan_hostpci({0: stored}, [], exclusive=False)
    assert plan["keep"] == [0] and plan["after"] == {0: "0000:01:00.0,romfile=/root/v.rom"}


def test_plan_each_step_places_every_entry_it_can():
    # step 2 goes on after an entry step 1 placed
    plan = property_strings.plan_hostpci({0: "mapping=gpu1", 3: "mapping=gpu2"}, [(None, "mapping=gpu1"), (None, "mapping=gpu2,pcie=1")])
    assert plan["set"] == {3: "mapping=gpu2,pcie=1"} and plan["keep"] == [0] and plan["delete"] == []
    # two replacements in one step, each in its own slot
    plan = property_strings.plan_hostpci({2: "mapping=gpu1", 5: "mapping=gpu2"},
                                         [(None, "mapping=gpu1,pcie=1"), (None, "mapping=gpu2,pcie=1")])
    assert plan["set"] == {2: "mapping=gpu1,pcie=1", 5: "mapping=gpu2,pcie=1"} and plan["delete"] == []
    # an exact match wins over the same device with other options at a lower slot
    plan = property_strings.plan_hostpci({1: "mapping=gpu1,pcie=1", 4: "mapping=gpu1"}, [(None, "mapping=gpu1")])
    assert plan["set"] == {} and plan["keep"] == [4] and plan["delete"] == [1]


def test_device_facts_virtfns_sorted_by_address_fields():
    facts = property_strings.device_facts({"id": "41:00.0", "virtfns": {"a": "00000:41:00.0", "b": "0000:41:00.1"}})
    assert facts["virtfns"] == ["0000:41:00.1", "00000:41:00.0"]


def test_mapping_refs_and_usage_skip_only_the_bad_item():
    mappings = [{"id": "pool", "map": ["node=pve1,path=zz,id=10de:20b5", "node=pve1,path=0000:01:00.0,id=10de:20b5"]}]
    assert property_strings.mapping_refs("pve1", mappings) == [("pool", "0000:01:00.0")]
    configs = {"8": {"hostpci0": "pcie=1"}, "9": {"hostpci0": "01:00.0,mdev=nvidia-5"}}
    assert property_strings.hostpci_usage("pve1", mappings, configs) == [
        {"vmid": 9, "slot": "hostpci0", "via": "host", "mapping": None, "paths": ["0000:01:00.0"], "mdev": "nvidia-5"}]


def test_check_map_entry_goes_on_after_each_finding():
    devices = [property_strings.device_facts(d) for d in HW]
    entry = property_strings.normalize_map_entry("node=pve1,path=0000:07:00.0;0000:02:00.0,id=10de:20b5,subsystem-id=10de:1533")
    assert property_strings.check_map_entry(entry, devices) == ["pci device '0000:07:00.0' not found",
                                                                "'id' does not match for '0000:02:00.0' (10de:2204 != 10de:20b5)"]
    pair = [property_strings.device_facts(_dev("0000:01:00.0", "0x030200", 1)),
            property_strings.device_facts(_dev("0000:02:00.0", "0x030200", 2, subsystem_device="0x9999"))]
    pool = property_strings.normalize_map_entry("node=pve1,path=0000:01:00.0;0000:02:00.0,id=10de:20b5,subsystem-id=10de:1533,iommugroup=1")
    assert property_strings.check_map_entry(pool, pair) == ["'subsystem-id' does not match for '0000:02:00.0' (10de:9999 != 10de:1533)"]
    no_group = [dict(d, iommu_group=-1) for d in pair]
    entry = property_strings.normalize_map_entry("node=pve1,path=0000:02:00.0,id=10de:20b5,subsystem-id=10de:1533")
    assert property_strings.check_map_entry(entry, no_group) == ["'subsystem-id' does not match for '0000:02:00.0' (10de:9999 != 10de:1533)"]


# --------------------------------------------------------------------------- ';' = one multifunction device (issue 39)

@pytest.mark.parametrize("paths,expected", [
    ("0000:01:00.0", None),
    ("0000:01:00.0;0000:01:00.1", None),
    ("0000:01:00.4;0000:01:00.5", None),  # two functions of one bus:slot (VFs included) are one device to PVE
    ("0000:01:00.0;0000:02:00.0", "host 0000:01:00.0;0000:02:00.0 joins functions of different devices (0000:01:00, "
                                  "0000:02:00): Proxmox VE passes every ';'-separated function to the VM together, as "
                                  "one multifunction device, not as alternatives; a pool is a PCI mapping with one map "
                                  "entry per device"),
    ("0000:01:00.0;0000:02:00.0;0000:01:00.1;0000:03:00.0", "host 0000:01:00.0;0000:02:00.0;0000:01:00.1;0000:03:00.0 "
                                                            "joins functions of different devices (0000:01:00, "
                                                            "0000:02:00, 0000:03:00): "),
    ("0000:01:00.1;0000:01:00.1", "host 0000:01:00.1;0000:01:00.1 names function 0000:01:00.1 more than once (a path "
                                  "without function is every function of the device)"),
    ("0000:01:00;0000:01:00.1", "host 0000:01:00;0000:01:00.1 names function 0000:01:00.1 more than once"),
    ("0000:01:00.1;0000:01:00", "host 0000:01:00.1;0000:01:00 names function 0000:01:00 more than once"),
    ("0000:01:00.0;0000:01:00.1;0000:01:00.0", "host 0000:01:00.0;0000:01:00.1;0000:01:00.0 names function 0000:01:00.0 "),
])
def test_joined_functions_problem(paths, expected):
    got = property_strings.joined_functions_problem(paths, "host")
    if expected is None:
        assert got is None
    else:
        assert got is not None and got.startswith(expected), got


def test_group_functions_joins_functions_of_a_device_and_keeps_devices_and_vfs_apart():
    assert property_strings.group_functions(["3:00.0", "01:00.0", "0000:01:00.1", "02:00"]) == [
        "0000:03:00.0", "0000:01:00.0;0000:01:00.1", "0000:02:00"]
    assert property_strings.group_functions(["01:00.4", "01:00.5", "01:00.0"], separate=["0000:01:00.4", "01:00.5"]) == [
        "0000:01:00.4", "0000:01:00.5", "0000:01:00.0"]
    assert property_strings.group_functions(["01:00.4", "01:00.5"]) == ["0000:01:00.4;0000:01:00.5"]
    assert property_strings.group_functions([]) == []
    with pytest.raises(PciError, match=r"^path 0000:01:00\.0;0000:01:00\.0 names function 0000:01:00\.0 more than once"):
        property_strings.group_functions(["01:00.0", "0000:01:00.0"])
    with pytest.raises(PciError, match=r"^path 0000:01:00\.4;0000:01:00\.4 names function"):
        property_strings.group_functions(["01:00.4", "01:00.4"], separate=["01:00.4"])
    with pytest.raises(PciError, match=r"^invalid PCI address 'zz'"):
        property_strings.group_functions(["zz"])


def test_path_functions_follow_lspci_prefix_matching():
    devices = [property_strings.device_facts(d) for d in HW]
    assert property_strings.path_functions("0000:01:00.1", devices) == ["0000:01:00.1"]
    assert property_strings.path_functions("0000:01:00", devices) == ["0000:01:00.0", "0000:01:00.1", "0000:01:00.4", "0000:01:00.5"]
    assert property_strings.path_functions("0000:02:00.1;0000:01:00.0", devices) == ["0000:02:00.1", "0000:01:00.0"]
    assert property_strings.path_functions("0000:07:00.0", devices) == []


def test_strict_hostpci_refuses_joined_devices_and_mdev_on_several_functions():
    with pytest.raises(PciError, match=r"^host 0000:01:00\.0;0000:02:00\.0 joins functions of different devices"):
        property_strings.normalize_hostpci({"host": "01:00.0;02:00.0"})
    with pytest.raises(PciError, match=r"^host 0000:01:00\.4;0000:01:00\.5 with mdev nvidia-1: cannot use mediated device "
                                       r"with multifunction device \(qemu-server parse_hostpci\); give one function$"):
        property_strings.normalize_hostpci({"host": "01:00.4;01:00.5", "mdev": "nvidia-1"})
    # what the server stored is read as it is
    assert property_strings.normalize_hostpci("01:00.0;02:00.0,mdev=nvidia-1") == {"host": "0000:01:00.0;0000:02:00.0", "mdev": "nvidia-1"}
    assert property_strings.normalize_hostpci({"host": "01:00.4;01:00.5"}) == {"host": "0000:01:00.4;0000:01:00.5"}
    assert property_strings.normalize_hostpci({"host": "01:00.4", "mdev": "nvidia-1"}) == {"host": "0000:01:00.4", "mdev": "nvidia-1"}
    assert property_strings.normalize_hostpci({"mapping": "mm", "mdev": "nvidia-1"}) == {"mapping": "mm", "mdev": "nvidia-1"}


@pytest.mark.parametrize("version,mdev,expected", [
    ((8, 3, 4), True, None), ((8, 0, 0), False, None), ((8, 4, 0), True, True), ((8, 4, 1), False, False),
    ((9, 0, 0), True, True), (None, False, False),
])
def test_mdev_checked_only_from_8_4(version, mdev, expected):
    # pve-guest-common 57cd454 (libpve-guest-common-perl 5.1.7, PVE 8.4) added the mdev comparison to assert_valid.
    assert property_strings.mdev_checked(version, mdev) is expected


def test_gpu_vms_lists_the_vms_holding_a_gpu_or_a_mapping():
    mappings = [{"id": "a100", "map": ["node=pve1,path=0000:01:00.0,id=10de:20b5"]},
                {"id": "elsewhere", "map": ["node=pve2,path=0000:01:00.0,id=10de:20b5"]}]
    configs = {100: {"name": "ml", "hostpci0": "mapping=a100,pcie=1"}, 101: {"hostpci1": "0000:04:00.0"},
               102: {"name": "moved", "hostpci0": "mapping=elsewhere"}, 103: {"name": "nogpu"}}
    listing = [{"vmid": 100, "name": "old-name", "status": "running"}, {"vmid": 102, "status": "stopped"},
               {"vmid": "101", "status": "stopped"}, {"vmid": 103, "status": "running"}]
    gpus = [{"id": "0000:01:00.0", "mdev_types": [], "vfs": []},
            {"id": "0000:41:00.0", "mdev_types": [], "vfs": [
                {"id": "0000:41:00.4", "mdev_types": [{"type": "nvidia-1", "name": "L40S-1Q"}]}]}]
    vms = property_strings.gpu_vms("pve1", gpus, listing, configs, mappings)
    # 101 passes a NIC through only and 103 has no hostpci: not GPU VMs. 102's mapping has no entry on pve1.
    assert [(v["vmid"], v["name"], v["status"], v["node"]) for v in vms] == [
        (100, "ml", "running", "pve1"), (102, "moved", "stopped", "pve1")]
    assert vms[0]["hostpci"][0]["gpus"] == ["0000:01:00.0"] and vms[1]["hostpci"][0]["gpus"] == []
    vf = property_strings.gpu_vms("pve1", gpus, [], {7: {"hostpci0": "0000:41:00.4,mdev=nvidia-1"}}, [])
    assert vf == [{"vmid": 7, "name": None, "status": None, "node": "pve1", "hostpci": [
        {"vmid": 7, "slot": "hostpci0", "via": "host", "mapping": None, "paths": ["0000:41:00.4"], "mdev": "nvidia-1",
         "gpus": ["0000:41:00.4"], "mdev_name": "L40S-1Q"}]}]
