"""Property tests (issue 14 point 4): the collection's property strings against PVE's own rules.

The oracle is lab/pvesim/schema.py, which follows PVE::JSONSchema::parse_property_string (pve-common) and the
formats of qemu-server PCI.pm ($hostpci_fmt) and pve-guest-common Mapping/PCI.pm ($map_fmt); the pvesim tests
check it against pve-api-subset.json. Two directions:
- every string PVE accepts is read by the collection (no valid configuration on a server makes a module fail), and
  reading it back in canonical form changes nothing PVE cares about;
- every string the collection writes is one PVE accepts and reads back to the same values.
Generators follow PVE's patterns except where no PCI device can exist: functions 8-f (the PCI function number has
three bits) and domains longer than eight hex digits (domains are 16 or 32 bits).
"""

from __future__ import annotations

import os
import sys

from hypothesis import given, settings, strategies as st

from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import property_strings
from ansible_collections.gpuops.provision.plugins.module_utils._proxmox.property_strings import PciError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from lab.pvesim import schema  # noqa: E402  pylint: disable=wrong-import-position

HEX = "0123456789abcdef"
LINE = st.characters(blacklist_characters=",\n\r", blacklist_categories=("Cs",))  # what a config line can hold


def hexdigits(n, upper=False):
    alphabet = HEX + ("ABCDEF" if upper else "")
    return st.text(alphabet, min_size=n, max_size=n)


def pci_address(require_domain=False, function=None):
    """A PVE $PCIRE address: optional 4+ digit domain, 2-digit bus and device, optional function."""
    domain = st.text(HEX, min_size=4, max_size=8)
    fn = st.sampled_from("01234567") if function is None else st.just(function)
    return st.builds(
        lambda d, b, s, f: (d + ":" if d else "") + b + ":" + s + ("." + f if f else ""),
        domain if require_domain else st.one_of(st.none(), domain), hexdigits(2), hexdigits(2),
        st.one_of(st.none(), fn))


BOOL = st.sampled_from(["0", "1", "on", "off", "yes", "no", "true", "false", "ON", "True"])
CONFIGID = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_-]{1,20}", fullmatch=True)
HOSTPCI_VALUES = {
    "mapping": CONFIGID,
    "rombar": BOOL, "pcie": BOOL, "x-vga": BOOL, "legacy-igd": BOOL,
    "romfile": st.text(st.characters(blacklist_characters=",;\n\r", blacklist_categories=("Cs",)), min_size=1, max_size=20),
    "mdev": st.text(st.characters(blacklist_characters="/.:,\n\r", blacklist_categories=("Cs",)), min_size=1, max_size=20),
    "vendor-id": hexdigits(4, upper=True).map(lambda h: "0x" + h),
    "device-id": hexdigits(4, upper=True).map(lambda h: "0x" + h),
    "sub-vendor-id": hexdigits(4).map(lambda h: "0x" + h),
    "sub-device-id": hexdigits(4).map(lambda h: "0x" + h),
    "driver": st.sampled_from(["vfio", "keep"]),
}


@st.composite
def pve_hostpci_strings(draw):
    """hostpciN values PVE 9.1 accepts, in any key order, with the device as a bare default key or host=."""
    parts = []
    if draw(st.booleans()):
        hosts = draw(st.lists(pci_address(), min_size=1, max_size=3))
        host = ";".join(hosts)
        parts.append(host if draw(st.booleans()) else "host=" + host)
    else:
        parts.append("mapping=" + draw(CONFIGID))
    keys = draw(st.lists(st.sampled_from(sorted(k for k in HOSTPCI_VALUES if k != "mapping")), unique=True, max_size=5))
    parts.extend("%s=%s" % (k, draw(HOSTPCI_VALUES[k])) for k in keys)
    order = draw(st.permutations(parts))
    return ",".join(order)


@st.composite
def pve_map_strings(draw):
    """Cluster mapping map items that PVE's $map_fmt accepts."""
    items = {
        "node": draw(st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,10}[a-zA-Z0-9])?", fullmatch=True)),
        "path": ";".join(draw(st.lists(pci_address(require_domain=True), min_size=1, max_size=3))),
        "id": draw(hexdigits(4, upper=True)) + ":" + draw(hexdigits(4, upper=True)),
    }
    if draw(st.booleans()):
        items["subsystem-id"] = draw(hexdigits(4)) + ":" + draw(hexdigits(4))
    if draw(st.booleans()):
        items["iommugroup"] = draw(st.from_regex(r"[+-]?[0-9]{1,4}", fullmatch=True))
    if draw(st.booleans()):
        items["description"] = draw(st.text(LINE, min_size=1, max_size=60).filter(lambda t: t.strip() and "=" not in t[:1]))
    order = draw(st.permutations(sorted(items)))
    return ",".join("%s=%s" % (k, items[k]) for k in order)


def pve_accepts_hostpci(text):
    _val, err = schema.check_value({"type": "string", "format": "pve-qm-hostpci"}, text)
    return err is None


def pve_parse_map(text):
    return schema.parse_property_string(schema.MAP_FMT, text)


@settings(max_examples=300, deadline=None)
@given(pve_hostpci_strings())
def test_every_hostpci_string_pve_accepts_is_read(text):
    assert pve_accepts_hostpci(text), text  # the generator makes valid strings (else the oracle disagrees with it)
    norm = property_strings.normalize_hostpci(text)  # as read from a server: must not raise
    out = property_strings.format_hostpci(norm)
    assert pve_accepts_hostpci(out), (text, out)
    assert property_strings.normalize_hostpci(out) == norm


@settings(max_examples=300, deadline=None)
@given(pve_map_strings())
def test_every_map_item_pve_accepts_is_read_and_written_back_as_pve_reads_it(text):
    theirs = pve_parse_map(text)  # raises if the generator made an invalid one
    norm = property_strings.normalize_map_entry(text)
    out = property_strings.format_map_entry(norm)
    again = pve_parse_map(out)
    assert sorted(again) == sorted(theirs)
    for key in ("node", "description"):
        assert again.get(key) == theirs.get(key)
    assert again["id"] == theirs["id"].lower()  # canonical: lower case, as sysfs has it (assert_valid compares strings)
    if "iommugroup" in theirs:
        assert int(again["iommugroup"]) == int(theirs["iommugroup"])


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "pcie": st.booleans(), "x-vga": st.booleans(), "rombar": st.booleans(),
    "romfile": st.text(max_size=12), "mdev": st.text(max_size=12), "vendor-id": st.text(HEX + "x", max_size=6),
    "driver": st.sampled_from(["vfio", "keep"]),
}), st.one_of(pci_address().map(lambda a: {"host": a}), CONFIGID.map(lambda m: {"mapping": m})))
def test_whatever_the_collection_writes_pve_accepts(options, device):
    entry = dict(device, **options)
    try:
        norm = property_strings.normalize_hostpci(entry)  # user input: strict
    except PciError:
        return  # refused with a message: nothing is written
    out = property_strings.format_hostpci(norm)
    assert pve_accepts_hostpci(out), (entry, out)
    parsed = schema.parse_property_string(schema.HOSTPCI_FMT, out)
    for key, value in norm.items():
        assert parsed[key] == value, (key, out)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_map_descriptions_are_written_only_when_pve_can_store_them(description):
    entry = {"node": "pve1", "path": "0000:01:00.0", "id": "10de:20b5", "description": description}
    try:
        norm = property_strings.normalize_map_entry(entry)
    except PciError as exc:
        assert repr(description) in str(exc) or "characters long" in str(exc)
        return
    out = property_strings.format_map_entry(norm)
    parsed = pve_parse_map(out)
    assert parsed.get("description", "") == norm.get("description", ""), out
