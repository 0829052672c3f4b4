"""Unit tests for module_utils/_pci.py: PCI ids, hostpci/map property strings, the hostpci planner, hardware facts."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils import _pci
from ansible_collections.gpuops.provision.plugins.module_utils._pci import PciError


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
    assert _pci.normalize_pci_address(text) == expected


@pytest.mark.parametrize("bad", ["", "01", "01:00.8", "zz:00.0", "0000:01:00.0.1", None, "01:00:00:00",
                                 # issue 14: a repair would be a guess - "01:00:00" is not domain 0001, and a
                                 # trailing newline or blank is not part of an address ("$" would let it through)
                                 "01:00:00", "0:01:00.0", "01:00.0\n", " 01:00.0", "01:00.0 "])
def test_bad_pci_address(bad):
    with pytest.raises(PciError):
        _pci.parse_pci_address(bad)


def test_address_function_default_and_slot():
    assert _pci.normalize_pci_address("01:00", function="0") == "0000:01:00.0"
    assert _pci.normalize_pci_address("01:00.1", function="0") == "0000:01:00.1"
    assert _pci.pci_slot("01:00.1") == "0000:01:00"


def test_address_covers_multifunction():
    assert _pci.address_covers("01:00", "0000:01:00.1")  # no function = whole device
    assert _pci.address_covers("0000:01:00.0", "0000:01:00.0")
    assert not _pci.address_covers("01:00.0", "0000:01:00.1")
    assert not _pci.address_covers("02:00", "0000:01:00.0")


@pytest.mark.parametrize("text,expected", [("10de:20b0", "10de:20b0"), ("10DE:20B0", "10de:20b0"),
                                           ("0x10de:0x20b0", "10de:20b0")])
def test_normalize_pci_id(text, expected):
    assert _pci.normalize_pci_id(text) == expected


@pytest.mark.parametrize("bad", ["10de", "10de:20b0:1", "xyz1:0000", "10de:12345", 42,
                                 # issue 14: three digits could be 020b or a truncated 20b0
                                 "10de:20b", "0x10de:1", "10de:20b0\n", " 10de:20b0"])
def test_bad_pci_id(bad):
    with pytest.raises(PciError):
        _pci.normalize_pci_id(bad)


def test_hex_id():
    assert _pci.normalize_hex_id("0x10DE") == "10de"
    assert _pci.normalize_hex_id(0x10DE) == "10de"
    with pytest.raises(PciError):
        _pci.normalize_hex_id("0xg000")


@pytest.mark.parametrize("value,expected", [(True, "1"), ("on", "1"), ("YES", "1"), ("true", "1"), ("1", "1"),
                                            (False, "0"), ("off", "0"), ("no", "0"), ("0", "0")])
def test_parse_bool(value, expected):
    assert _pci.parse_bool(value) == expected


def test_parse_bool_rejects():
    with pytest.raises(PciError):
        _pci.parse_bool("maybe")


# ----------------------------------------------------------------------------- property strings

def test_split_property_string_has_no_quoting():
    # PVE::JSONSchema::parse_property_string splits on every comma: a quote is an ordinary character.
    assert _pci.split_property_string('01:00,description="a,b=c",x=1') == [
        (None, "01:00"), ("description", '"a'), ("b", 'c"'), ("x", "1")]
    with pytest.raises(PciError, match="duplicate key"):
        _pci.split_property_string('01:00,description="a,b"')  # the part 'b"' is a second default-key value
    assert _pci.split_property_string('mapping=a,description="x"') == [("mapping", "a"), ("description", '"x"')]
    assert _pci.split_property_string("01:00,, ,pcie=1") == [(None, "01:00"), ("pcie", "1")]  # blank parts skipped


@pytest.mark.parametrize("bad,msg", [
    ("01:00,pcie=", "missing key or value"),     # key=value needs a value (^([^=]+)=(.+)$)
    ("01:00,=1", "missing key or value"),
    ("01:00,pcie=1,pcie=0", "duplicate key"),
    ("01:00,02:00", "duplicate key"),
])
def test_split_property_string_refuses_what_pve_refuses(bad, msg):
    with pytest.raises(PciError, match=msg):
        _pci.split_property_string(bad)


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
    assert _pci.hostpci_equal(a, b)
    assert _pci.format_hostpci(_pci.normalize_hostpci(a)) == _pci.format_hostpci(_pci.normalize_hostpci(b))


@pytest.mark.parametrize("a,b", [
    ("01:00", "01:00.0"),             # all functions vs function 0
    ("mapping=gpu1,rombar=0", "mapping=gpu1"),
    ("mapping=gpu1,pcie=1", "mapping=gpu1"),
    ("01:00.4;01:00.5", "01:00.5;01:00.4"),  # order of alternatives is the try order
    ("mapping=gpu1,mdev=nvidia-1", "mapping=gpu1,mdev=nvidia-2"),
])
def test_hostpci_different(a, b):
    assert not _pci.hostpci_equal(a, b)


def test_format_hostpci_canonical():
    norm = _pci.normalize_hostpci("x-vga=on,pcie=yes,host=01:00,romfile=vbios.bin,rombar=0")
    assert _pci.format_hostpci(norm) == "0000:01:00,pcie=1,rombar=0,romfile=vbios.bin,x-vga=1"
    assert _pci.format_hostpci(_pci.normalize_hostpci({"mapping": "a100", "mdev": "nvidia-1034"})) == "mapping=a100,mdev=nvidia-1034"


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
        _pci.normalize_hostpci(bad)


def test_map_entry_normalisation():
    a = _pci.normalize_map_entry("node=pve1,path=0000:01:00.0,id=10DE:20B5,subsystem-id=10de:1533,iommugroup=012")
    b = _pci.normalize_map_entry({"iommugroup": 12, "id": "0x10de:0x20b5", "node": "pve1", "path": "01:00.0",
                                  "subsystem-id": "10de:1533"})
    assert a == b
    assert _pci.format_map_entry(a) == "id=10de:20b5,iommugroup=12,node=pve1,path=0000:01:00.0,subsystem-id=10de:1533"
    # the formatted string parses back to the same entry
    assert _pci.normalize_map_entry(_pci.format_map_entry(a)) == a


def test_map_entry_description_with_comma_is_refused_not_quoted():
    # issue 14: PVE has no quoting, a quoted value would be split; the old code wrote description="slot 1, left".
    with pytest.raises(PciError, match="contains a comma"):
        _pci.normalize_map_entry({"node": "n1", "path": "0000:01:00", "id": "10de:20b5", "description": "slot 1, left"})
    e = _pci.normalize_map_entry({"node": "n1", "path": "0000:01:00", "id": "10de:20b5", "description": 'slot "1" left'})
    assert _pci.format_map_entry(e) == 'description=slot "1" left,id=10de:20b5,node=n1,path=0000:01:00'
    assert _pci.normalize_map_entry(_pci.format_map_entry(e)) == e


def test_hostpci_romfile_with_comma_or_path_is_refused():
    with pytest.raises(PciError, match="invalid romfile"):
        _pci.normalize_hostpci({"host": "01:00.0", "romfile": "a,b.rom"})
    for bad in ("../../etc/shadow", "/root/vbios.rom", "sub/vbios.rom", "..", "vbios.rom\n", "my rom.bin"):
        with pytest.raises(PciError, match="invalid romfile"):
            _pci.normalize_hostpci({"host": "01:00.0", "romfile": bad})
    # what PVE itself stores is still read (lenient for server strings), so no existing config is refused
    assert _pci.normalize_hostpci("01:00.0,romfile=/root/my rom.bin")["romfile"] == "/root/my rom.bin"
    assert _pci.normalize_hostpci({"host": "01:00.0", "romfile": "vbios..rom"})["romfile"] == "vbios..rom"


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
    ("node=pve1,path=0000:01:00.0;,id=10de:20b5", "empty alternative"),
    ("node=pve1,path=0000:01:00.0,id=10de:20b", "invalid id"),
    ("node=pve1,node=pve2,path=0000:01:00.0,id=10de:20b5", "duplicate key"),
])
def test_map_entry_invalid(bad, msg):
    with pytest.raises(PciError, match=msg):
        _pci.normalize_map_entry(bad)


def test_map_entry_description_length_and_line_breaks():
    base = {"node": "pve1", "path": "01:00.0", "id": "10de:20b5"}
    assert _pci.normalize_map_entry(dict(base, description="x" * 4096))["description"] == "x" * 4096
    with pytest.raises(PciError, match="4097 characters long, Proxmox VE allows 4096"):
        _pci.normalize_map_entry(dict(base, description="x" * 4097))
    with pytest.raises(PciError, match="line break"):
        _pci.normalize_map_entry(dict(base, description="left slot\n"))


def test_map_list_order_across_nodes_ignored_within_node_kept():
    a = ["node=b,path=0000:02:00.0,id=10de:0001", "node=a,path=0000:01:00.4,id=10de:0001",
         "node=a,path=0000:01:00.5,id=10de:0001"]
    b = [a[1], a[2], a[0]]
    c = [a[2], a[1], a[0]]
    assert _pci.normalize_map_list(a) == _pci.normalize_map_list(b)
    assert _pci.normalize_map_list(a) != _pci.normalize_map_list(c)


# ----------------------------------------------------------------------------- planner

def test_plan_idempotent_with_equivalent_strings():
    current = {0: "0000:01:00,pcie=on,x-vga=1", 1: "mapping=gpu2,rombar=1"}
    plan = _pci.plan_hostpci(current, [(None, "host=01:00,x-vga=1,pcie=1"), (None, {"mapping": "gpu2"})])
    assert plan["set"] == {} and plan["delete"] == []
    assert plan["keep"] == [0, 1]


def test_plan_replace_in_place_keeps_slot():
    plan = _pci.plan_hostpci({4: "mapping=gpu1"}, [(None, "mapping=gpu1,pcie=1")])
    assert plan["set"] == {4: "mapping=gpu1,pcie=1"} and plan["delete"] == []


def test_plan_new_entry_takes_lowest_free_slot_and_exclusive_deletes():
    plan = _pci.plan_hostpci({0: "mapping=old1", 2: "mapping=gpu1"}, [(None, "mapping=gpu1"), (None, "mapping=gpu2")])
    assert plan["set"] == {0: "mapping=gpu2"}
    assert plan["delete"] == []  # slot 0 is overwritten, not deleted
    assert plan["after"] == {0: "mapping=gpu2", 2: "mapping=gpu1"}
    plan = _pci.plan_hostpci({5: "mapping=old1", 2: "mapping=gpu1"}, [(None, "mapping=gpu1"), (None, "mapping=gpu2")])
    assert plan["set"] == {0: "mapping=gpu2"} and plan["delete"] == [5]


def test_plan_non_exclusive_keeps_others_and_avoids_their_slots():
    plan = _pci.plan_hostpci({0: "0000:05:00.0"}, [(None, "mapping=gpu1")], exclusive=False)
    assert plan["set"] == {1: "mapping=gpu1"} and plan["delete"] == []
    assert plan["after"] == {0: "0000:05:00.0", 1: "mapping=gpu1"}


def test_plan_explicit_slot_moves_device():
    plan = _pci.plan_hostpci({0: "mapping=gpu1"}, [(3, "mapping=gpu1")])
    assert plan["set"] == {3: "mapping=gpu1"} and plan["delete"] == [0]


def test_plan_empty_removes_all():
    plan = _pci.plan_hostpci({0: "mapping=gpu1", 7: "01:00"}, [])
    assert plan["set"] == {} and plan["delete"] == [0, 7] and plan["after"] == {}


def test_plan_errors():
    with pytest.raises(PciError, match="requested twice"):
        _pci.plan_hostpci({}, [(1, "mapping=gpu1"), (1, "mapping=gpu2")])
    with pytest.raises(PciError, match="same device"):
        _pci.plan_hostpci({}, [(None, "mapping=gpu1"), (None, "mapping=gpu1,pcie=1")])
    with pytest.raises(PciError, match="out of range"):
        _pci.plan_hostpci({}, [(16, "mapping=gpu1")])
    with pytest.raises(PciError, match="no free hostpci slot"):
        _pci.plan_hostpci({}, [(None, "mapping=g%02d" % i) for i in range(17)])


def test_hostpci_from_config_ignores_other_keys():
    cfg = {"hostpci0": "01:00,pcie=1", "hostpci12": "mapping=gpu1", "net0": "virtio", "hostpcix": "junk"}
    assert sorted(_pci.hostpci_from_config(cfg)) == [0, 12]


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
    d = _pci.device_facts(HW[1])
    assert d["pci_id"] == "10de:20b5" and d["subsystem_id"] == "10de:1533"
    assert d["mdev"] is True and d["driver"] == "nvidia"
    assert d["virtfns"] == ["0000:01:00.4", "0000:01:00.5"]


def test_iommu_isolation_bridges_and_own_functions_ok_foreign_not():
    devices = [_pci.device_facts(d) for d in HW]
    ok, members = _pci.iommu_isolation(devices, "0000:01:00.0")
    assert ok and members == ["0000:00:01.0", "0000:01:00.0", "0000:01:00.1"]
    ok, members = _pci.iommu_isolation(devices, "0000:02:00.0")
    assert not ok and "0000:03:00.0" in members
    assert _pci.iommu_isolation([_pci.device_facts(_dev("0000:09:00.0", "0x030000", -1))], "0000:09:00.0") == (False, [])


def test_gpu_facts_functions_vfs_mappings_usage():
    mappings = [{"id": "a100", "map": ["node=pve1,path=0000:01:00.0,id=10de:20b5"]},
                {"id": "vfpool", "map": ["node=pve1,path=0000:01:00.4;0000:01:00.5,id=10de:20b6",
                                         "node=pve2,path=0000:01:00.4,id=10de:20b6"]}]
    configs = {100: {"hostpci0": "mapping=a100,pcie=1"}, 101: {"hostpci1": "02:00"}, 102: {"net0": "x"}}
    gpus = _pci.gpu_facts("pve1", HW, mdev_types={"0000:01:00.4": [{"type": "nvidia-1"}]}, mappings=mappings, vm_configs=configs)
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
    devices = [_pci.device_facts(d) for d in HW]
    good = _pci.normalize_map_entry("node=pve1,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de:1533,iommugroup=1")
    assert _pci.check_map_entry(good, devices) == []
    whole = _pci.normalize_map_entry("node=pve1,path=0000:01:00,id=10de:20b5,subsystem-id=10de:1533,iommugroup=1")
    assert _pci.check_map_entry(whole, devices) == []
    wrong = _pci.normalize_map_entry("node=pve1,path=0000:01:00.0,id=10de:2330,subsystem-id=10de:1533,iommugroup=7")
    problems = _pci.check_map_entry(wrong, devices)
    assert any("'id' does not match" in p and "10de:20b5 != 10de:2330" in p for p in problems)
    assert any("'iommugroup' does not match" in p for p in problems)
    missing_sub = _pci.normalize_map_entry("node=pve1,path=0000:01:00.0,id=10de:20b5,iommugroup=1")
    assert any("missing expected property 'subsystem-id'" in p for p in _pci.check_map_entry(missing_sub, devices))
    absent = _pci.normalize_map_entry("node=pve1,path=0000:07:00.0,id=10de:20b5")
    assert _pci.check_map_entry(absent, devices) == ["pci device '0000:07:00.0' not found"]


def test_check_map_entry_iommugroup_both_ways_first_path_only():
    # issue 14 point 1: PVE::Mapping::PCI::assert_valid expects the group whenever the hardware has one.
    devices = [_pci.device_facts(d) for d in HW]
    no_group = _pci.normalize_map_entry("node=pve1,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de:1533")
    assert _pci.check_map_entry(no_group, devices) == [
        "missing expected property 'iommugroup' for device '0000:01:00.0' (hardware has 1)"]
    no_iommu = [dict(d, iommu_group=-1) for d in devices]
    with_group = _pci.normalize_map_entry("node=pve1,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de:1533,iommugroup=1")
    assert _pci.check_map_entry(with_group, no_iommu) == [
        "unexpected property 'iommugroup' configured for device '0000:01:00.0' (hardware has none)"]
    # the group of later alternatives is not checked (idx > 0 in assert_valid)
    pool = _pci.normalize_map_entry("node=pve1,path=0000:01:00.0;0000:02:00.0,id=10de:20b5,iommugroup=1")
    assert not any("iommugroup" in p for p in _pci.check_map_entry(pool, devices))


def test_check_map_entry_mdev_both_ways():
    # issue 14 point 2: PVE 8.4+ compares the mapping's mdev flag with the device, in both directions.
    devices = [_pci.device_facts(d) for d in HW]
    entry = _pci.map_entry_from_device("pve1", _pci.device_facts(HW[1]))  # HW[1] has the nvidia/ sysfs interface
    assert _pci.check_map_entry(entry, devices, mdev=True) == []
    assert _pci.check_map_entry(entry, devices) == []  # no flag given: not compared (PVE before 8.4)
    assert _pci.check_map_entry(entry, devices, mdev=False) == [
        "'mdev' does not match for '0000:01:00.0': the mapping says no mdev, the device provides mediated devices"]
    plain = [dict(d, mdev=False) for d in devices]
    assert _pci.check_map_entry(entry, plain, mdev=True) == [
        "'mdev' does not match for '0000:01:00.0': the mapping says mdev, the device cannot provide mediated devices"]
    capable = [dict(d, mdev=True) for d in devices]
    assert _pci.mdev_capability(capable) is True and _pci.mdev_capability(plain) is False
    assert _pci.mdev_capability([capable[0], plain[0]]) is None


def test_map_entry_from_device():
    dev = _pci.device_facts(HW[1])
    e = _pci.map_entry_from_device("pve1", dev)
    assert _pci.format_map_entry(e) == "id=10de:20b5,iommugroup=1,node=pve1,path=0000:01:00.0,subsystem-id=10de:1533"
    e = _pci.map_entry_from_device("pve1", dev, whole_device=True)
    assert _pci.format_map_entry(e) == "id=10de:20b5,iommugroup=1,node=pve1,path=0000:01:00,subsystem-id=10de:1533"
    e = _pci.map_entry_from_device("pve1", dict(dev, iommu_group=-1, subsystem_id=None))
    assert _pci.format_map_entry(e) == "id=10de:20b5,node=pve1,path=0000:01:00.0"


def test_subsystem_zero_is_kept_as_assert_valid_expects_it():
    d = _pci.device_facts({"id": "0000:05:00.0", "class": "0x030000", "vendor": "0x10de", "device": "0x1eb8",
                           "subsystem_vendor": "0x0000", "subsystem_device": "0x0000", "iommugroup": 5})
    assert d["subsystem_id"] == "0000:0000"


@pytest.mark.parametrize("version,option,ok", [
    ((8, 3, 5), "live-migration-capable", False), ((8, 4, 0), "live-migration-capable", True),
    ((9, 0, 3), "driver", False), ((9, 1, 1), "driver", True), (None, "driver", True)])
def test_version_gate(version, option, ok):
    msg = _pci.version_gate(option, version)
    assert (msg is None) == ok
    if not ok:
        assert "needs Proxmox VE" in msg and ".".join(map(str, version)) in msg


def test_parse_pve_version():
    assert _pci.parse_pve_version("8.4.1") == (8, 4, 1)
    assert _pci.parse_pve_version("9.0") == (9, 0, 0)
    assert _pci.parse_pve_version(None) is None


def test_permission_problems_mirror_check_hostpci_perm():
    # issue 14 point 6: raw host= and romfile are root@pam's alone, for the new value, the replaced and the deleted one.
    current = {0: _pci.normalize_hostpci("0000:01:00.0,pcie=1"), 1: _pci.normalize_hostpci("mapping=ga,romfile=v.rom"),
               2: _pci.normalize_hostpci("mapping=gb")}
    plan = {"set": {0: "mapping=a100", 2: "mapping=gb,romfile=x.rom", 3: "0000:02:00.0"}, "delete": [1]}
    problems = _pci.permission_problems(plan, current, is_root=False)
    assert problems == [
        "hostpci0: replacing the existing entry has a raw host device 0000:01:00.0",
        "hostpci1: deleting the existing entry has a romfile v.rom",
        "hostpci2: the new entry has a romfile x.rom",
        "hostpci3: the new entry has a raw host device 0000:02:00.0",
    ]
    assert _pci.permission_problems(plan, current, is_root=True) == []
    assert _pci.permission_problems({"set": {2: "mapping=gc"}, "delete": []}, current, is_root=False) == []
