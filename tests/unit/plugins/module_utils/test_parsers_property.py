"""Property tests (issue 15 point 9) for the pure parsers: mig-parted v1 documents and NVIDIA driver/package versions.

Whatever a user or a server hands them, they return a value or raise the collection's own error type (which
modules turn into a clear message); and what they print parses back to the same thing.
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import versions
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry

# JSON-like values, as a YAML document or module arguments give them
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10 ** 20, max_value=10 ** 20) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20)
KEYS = st.sampled_from(["devices", "device-filter", "mig-enabled", "mig-devices", "version", "mig-configs", "other"])
PROFILE = st.sampled_from(["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1c.3g.20gb", "1g.10gb+me", "x"])
ENTRY = st.fixed_dictionaries({}, optional={
    "devices": st.one_of(st.just("all"), st.lists(st.integers(min_value=-2, max_value=9), max_size=3), JSON),
    "device-filter": st.one_of(st.just("0x20B010DE"), st.lists(st.sampled_from(["0x20B010DE", "0x2330", "x"]), max_size=2), JSON),
    "mig-enabled": st.one_of(st.booleans(), JSON),
    "mig-devices": st.one_of(st.dictionaries(PROFILE, st.integers(min_value=-1, max_value=10 ** 9), max_size=3), JSON),
}) | st.dictionaries(KEYS, JSON, max_size=4)


@settings(max_examples=400, deadline=None)
@given(st.lists(ENTRY, max_size=3) | JSON)
def test_mig_entries_parse_or_raise_mig_error(entries):
    try:
        parsed = geometry.parse_entries(entries)
    except geometry.MigError as exc:
        assert str(exc)  # a message, never an empty error
        return
    for item in parsed:
        # Any integer index parses (as in mig-parted); check_entries refuses the ones a host does not have.
        assert item["devices"] == "all" or all(isinstance(i, int) and not isinstance(i, bool) for i in item["devices"])
        try:
            geometry.check_entries(parsed, 4)
        except geometry.MigError as exc:
            assert str(exc)
        else:
            assert item["devices"] == "all" or all(0 <= i < 4 for i in item["devices"])
            assert not item["bad_filters"]
        assert all(isinstance(c, int) and c > 0 for c in item["mig_devices"].values())


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({"version": st.sampled_from(["v1", "v2", 1, None]),
                              "mig-configs": st.dictionaries(st.text(min_size=1, max_size=8), st.lists(ENTRY, max_size=2),
                                                             max_size=2) | JSON}) | JSON,
       st.none() | st.text(max_size=8))
def test_mig_documents_parse_or_raise_mig_error(document, selected):
    try:
        geometry.parse_config(document, selected)
    except geometry.MigError as exc:
        assert str(exc)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20) | st.integers() | st.none() | st.floats(allow_nan=False))
def test_driver_versions_parse_or_raise_version_error(value):
    try:
        version = versions.parse_driver_version(value)
    except versions.VersionError as exc:
        assert str(exc)
        return
    again = versions.parse_driver_version(str(version))
    assert again == version and "\n" not in str(version)


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"[1-9][0-9]{2}\.[0-9]{1,3}(\.[0-9]{1,3})?", fullmatch=True))
def test_driver_version_round_trip(text):
    version = versions.parse_driver_version(text)
    assert str(version) == text and versions.parse_driver_version(str(version)) == version


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30), st.sampled_from(["deb", "rpm"]))
def test_package_versions_parse_or_raise_version_error(value, scheme):
    try:
        version = versions.parse_package_version(value, scheme)
    except versions.VersionError as exc:
        assert str(exc)
        return
    # A version that reaches apt or dnf on a command line: no white space or line break can ride along.
    assert not any(c.isspace() for c in version.text)
    assert versions.compare_versions(version.text, version.text, scheme) == 0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=8) | st.integers() | st.none())
def test_branches_parse_or_raise_version_error(value):
    try:
        branch = versions.parse_branch(value)
    except versions.VersionError as exc:
        assert str(exc)
        return
    assert versions.parse_branch(branch) == branch
