"""Unit tests for module_utils/_proxmox/api.py: session options, error mapping, write counting, task waiting (no network)."""

from __future__ import annotations

import pytest
from proxmoxer.core import ResourceException

from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import api as proxmox_api
from ansible_collections.gpuops.provision.plugins.module_utils._proxmox.api import PveClient, PveError


def _params(**kw):
    p = {"api_host": "pve.example.com", "api_port": 8443, "api_user": "root@pam", "api_password": None,
         "api_token_id": None, "api_token_secret": None, "validate_certs": True, "ca_path": None, "api_timeout": 7}
    p.update(kw)
    return p


def test_session_prefers_token_and_uses_ca_path_for_verification():
    import certifi  # pylint: disable=import-outside-toplevel
    # ca_path is loaded before the session is made (a broken one fails naming the option), so it must be a CA file.
    client = PveClient.from_params(_params(api_token_id="ansible", api_token_secret="s3cret", api_password="pw",
                                           ca_path=certifi.where()))
    backend = client.api._backend  # pylint: disable=protected-access
    assert backend.get_base_url() == "https://pve.example.com:8443/api2/json"
    auth = client.api._store["session"].auth  # pylint: disable=protected-access
    assert type(auth).__name__ == "ProxmoxHTTPApiTokenAuth"  # no ticket login with a password
    assert auth.verify_ssl == certifi.where()
    assert auth.timeout == 7


def test_session_verification_on_by_default_and_can_be_disabled():
    auth = PveClient.from_params(_params(api_token_id="a", api_token_secret="b")).api._store["session"].auth  # pylint: disable=protected-access
    assert auth.verify_ssl is True
    auth = PveClient.from_params(_params(api_token_id="a", api_token_secret="b", validate_certs=False)).api._store["session"].auth  # noqa: E501 pylint: disable=protected-access
    assert auth.verify_ssl is False
    params = _params(api_token_id="a", api_token_secret="b")
    del params["validate_certs"]
    auth = PveClient.from_params(params).api._store["session"].auth  # pylint: disable=protected-access
    assert auth.verify_ssl is True


def test_password_login_failure_is_a_clear_error():
    # Password auth logs in at construction; an unreachable host must raise PveError naming host and port.
    with pytest.raises(PveError, match=r"cannot connect to 127\.0\.0\.1:1"):
        PveClient.from_params(_params(api_host="127.0.0.1", api_port=1, api_password="pw", api_timeout=2))


def test_error_message_has_status_reason_and_errors():
    exc = ResourceException(400, "Parameter verification failed.", "Parameter verification failed.",
                            errors={"hostpci0": "invalid format - value does not match the regex pattern"})
    msg = proxmox_api.error_message(exc)
    assert msg == "HTTP 400: Parameter verification failed. (hostpci0: invalid format - value does not match the regex pattern)"
    exc = ResourceException(500, "only root can set 'hostpci0' config for non-mapped devices", "")
    assert proxmox_api.error_message(exc) == "HTTP 500: only root can set 'hostpci0' config for non-mapped devices"


class FakeApi:
    """Records calls and answers from a script; stands in for ProxmoxAPI path objects."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, path):
        api = self

        class Res:
            def _do(self, method, **params):
                api.calls.append((method, path, params))
                answer = api.answers[(method, path)]
                if isinstance(answer, list) and answer and isinstance(answer[0], (dict, Exception)) and method == "get" \
                        and path.endswith("/status"):
                    answer = answer.pop(0)
                if isinstance(answer, Exception):
                    raise answer
                return answer

            def get(self, **p):
                return self._do("get", **p)

            def post(self, **p):
                return self._do("post", **p)

            def put(self, **p):
                return self._do("put", **p)

            def delete(self, **p):
                return self._do("delete", **p)

        return Res()


UPID = "UPID:pve1:00001000:00000001:00000001:qmstart:100:root@pam!ansible:"


def test_wait_task_polls_until_stopped_and_counts_writes():
    api = FakeApi({
        ("post", "nodes/pve1/qemu/100/status/start"): UPID,
        ("get", "nodes/pve1/tasks/%s/status" % UPID): [
            {"status": "running"}, {"status": "running"}, {"status": "stopped", "exitstatus": "OK"}],
    })
    client = PveClient(api, poll_interval=0)
    upid = client.post("nodes/pve1/qemu/100/status/start", timeout=None)
    assert client.wait_task("pve1", upid)["exitstatus"] == "OK"
    assert client.writes == [("POST", "nodes/pve1/qemu/100/status/start")]
    assert api.calls[0] == ("post", "nodes/pve1/qemu/100/status/start", {})  # None values are dropped
    assert len(api.calls) == 4


def test_wait_task_failure_and_timeout():
    api = FakeApi({("get", "nodes/pve1/tasks/%s/status" % UPID): [
        {"status": "stopped", "exitstatus": "q35 machine model is not enabled"}]})
    with pytest.raises(PveError, match="start of VM 100 .* failed: q35 machine model is not enabled"):
        PveClient(api, poll_interval=0).wait_task("pve1", UPID, what="start of VM 100")
    api = FakeApi({("get", "nodes/pve1/tasks/%s/status" % UPID): [{"status": "running"}] * 1000})
    with pytest.raises(PveError, match="did not finish within 0.05s"):
        PveClient(api, poll_interval=0.01).wait_task("pve1", UPID, timeout=0.05)
    warn = FakeApi({("get", "nodes/pve1/tasks/%s/status" % UPID): [{"status": "stopped", "exitstatus": "WARNINGS: 1"}]})
    assert PveClient(warn, poll_interval=0).wait_task("pve1", UPID)["exitstatus"] == "WARNINGS: 1"


def test_api_errors_become_pve_errors_with_path():
    api = FakeApi({("get", "cluster/mapping/pci/nope"): ResourceException(500, "mapping 'nope' not found", "")})
    with pytest.raises(PveError, match=r"GET /cluster/mapping/pci/nope failed: HTTP 500: mapping 'nope' not found"):
        PveClient(api).get("cluster/mapping/pci/nope")


def test_a_refused_token_names_endpoint_user_and_token_id_never_the_secret():
    # issue 41 point 3: PVE answers a bad token with "HTTP 401: invalid token value!", naming nothing; the credential
    # may come from an AWX injector, an environment variable or a role default, so the error says which was used.
    client = PveClient.from_params(_params(api_token_id="ansible", api_token_secret="s3cret-value"))
    client.api = FakeApi({("get", "nodes"): ResourceException(401, "invalid token value!", "")})
    with pytest.raises(PveError) as err:
        client.get("nodes")
    msg = str(err.value)
    assert msg.startswith("GET /nodes failed: HTTP 401: invalid token value!; "
                          "pve.example.com:8443 as root@pam, token id ansible was refused: check the user, the token id")
    assert "s3cret-value" not in msg
    # A 403 (a known user without the privilege) is another matter: no credential hint.
    client.api = FakeApi({("get", "nodes"): ResourceException(403, "Permission check failed", "")})
    with pytest.raises(PveError) as err:
        client.get("nodes")
    assert "was refused" not in str(err.value)
    assert proxmox_api.identity(_params(api_password="pw")) == "pve.example.com:8443 as root@pam with a password"


def test_mapping_lookup_returns_none_when_absent_and_nodes_cached():
    api = FakeApi({("get", "cluster/mapping/pci"): [{"id": "a100"}],
                   ("get", "cluster/mapping/pci/a100"): {"map": ["node=pve1,path=0000:01:00.0,id=10de:20b5"], "digest": "d"},
                   ("get", "nodes"): [{"node": "pve2", "status": "offline"}, {"node": "pve1", "status": "online"}]})
    client = PveClient(api)
    assert client.mapping("nope") is None
    assert client.mapping("a100")["digest"] == "d"
    assert client.nodes() == ["pve1", "pve2"] and client.nodes(online_only=True) == ["pve1"]
    assert [c for c in api.calls if c[1] == "nodes"] == [("get", "nodes", {})]


def test_vm_lookup_is_one_cluster_resources_call_even_with_an_offline_node():
    # issue 14 point 5: asking every node fails at the first offline one; /cluster/resources lists all VMs.
    api = FakeApi({("get", "cluster/resources"): [{"type": "qemu", "vmid": 100, "node": "pve1"},
                                                  {"type": "lxc", "vmid": 200, "node": "pve1"},
                                                  {"type": "qemu", "vmid": 200, "node": "pve2", "status": "unknown"}]})
    client = PveClient(api)
    # The lxc container with the same id is not a VM; one call, and it lists the offline node's VMs too.
    assert client.vm_nodes() == {100: "pve1", 200: "pve2"} and client.vm_nodes().get(999) is None
    assert api.calls == [("get", "cluster/resources", {"type": "vm"})] * 2


def test_version_is_read_once_and_offline_nodes_are_named():
    api = FakeApi({("get", "version"): {"version": "8.3.5", "release": "8.3"},
                   ("get", "nodes"): [{"node": "pve1", "status": "online"}, {"node": "pve2", "status": "offline"}]})
    client = PveClient(api)
    assert client.version() == (8, 3, 5) and client.version() == (8, 3, 5)
    assert [c for c in api.calls if c[1] == "version"] == [("get", "version", {})]
    client.require_online("pve1", "read it")
    with pytest.raises(PveError, match="^node pve2 is offline, cannot read it$"):
        client.require_online("pve2", "read it")
    with pytest.raises(PveError, match=r"^unknown node pve3 \(cluster has: pve1, pve2\)$"):
        client.require_online("pve3", "read it")
