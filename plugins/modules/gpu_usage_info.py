# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_usage_info
short_description: GPU use measured by DCGM through Prometheus, and what to share
version_added: 0.1.0
description:
  - Reads dcgm-exporter's series from Prometheus's HTTP API (C(/api/v1/query_range)) over a window such as a week and
    returns, per GPU and per MIG instance, the mean, p95 and max of SM activity (C(DCGM_FI_PROF_SM_ACTIVE)), SM
    occupancy (C(DCGM_FI_PROF_SM_OCCUPANCY)), DRAM activity (C(DCGM_FI_PROF_DRAM_ACTIVE)) and framebuffer use
    (C(DCGM_FI_DEV_FB_USED), C(DCGM_FI_DEV_FB_FREE)), with C(DCGM_FI_DEV_GPU_UTIL) beside them, the hours observed and
    the pods and namespaces seen.
  - With O(advise=true), also the advice per node (or per pool of O(pools)) - keep whole, time-slicing with replicas,
    MIG with a mig-parted geometry, or saturated (add capacity) - each with the figures and the rule behind it, and
    a pool definition for the P(gpuops.provision.gpu_pools#role) role and a mig-parted document for
    P(gpuops.provision.mig_reconfigure#role).
  - Also the GPU-hours per MIG profile and per namespace (RV(gpu_hours)), the chargeback unit of GPU-hours per
    profile rather than per card, and with O(series=true) each device's SM activity and memory over the window
    downsampled for a chart (the fleet report draws them).
  - Series are grouped by dcgm-exporter's labels C(Hostname) (C(hostname) in its newer builds), C(gpu), C(UUID) and
    C(GPU_I_ID); pods by C(namespace), C(pod), C(container).
extends_documentation_fragment:
  - gpuops.provision._attributes
  - gpuops.provision._attributes.INFO_MODULE
options:
  url:
    description:
      - Prometheus base URL, for example V(https://prometheus.example.com:9090) (without C(/api/v1)).
      - Falls back to the E(PROMETHEUS_URL) environment variable.
    type: str
    required: true
  bearer_token:
    description:
      - Sent as an C(Authorization) header (C(Bearer) scheme), for a Prometheus behind an authenticating proxy.
      - Falls back to the E(PROMETHEUS_BEARER_TOKEN) environment variable.
    type: str
  validate_certs:
    description:
      - Verify the server's TLS certificate. Keep this on; use O(ca_path) for a private CA.
      - V(false) turns verification off whatever O(ca_path) says, and the module warns.
      - Falls back to the E(PROMETHEUS_VALIDATE_CERTS) environment variable.
    type: bool
    default: true
  ca_path:
    description:
      - PEM file with the CA certificate(s) that signed the server's certificate. Used only while O(validate_certs=true).
      - Falls back to the E(PROMETHEUS_CA_PATH) environment variable.
    type: path
  api_timeout:
    description: Seconds to wait for the connection and for one answer (1 to 3600); also sent as the query's C(timeout).
    type: int
    default: 30
  window:
    description: How far back to read, a Prometheus duration with one unit (V(7d), V(36h), V(90m)).
    type: str
    default: 7d
  end:
    description: End of the window, in Unix seconds. Default is Prometheus's own clock (C(time())).
    type: float
  step:
    description:
      - Seconds between points. Default is the smallest of 30 s, 1, 2, 5, 10, 15, 30 minutes, 1, 2, 6 hours, 1 day that
        keeps the window within 2016 points (a week at 5 minutes). Activity is averaged over each step, memory also
        read at its peak within each step.
    type: int
  match:
    description: PromQL label matchers added to every query, each one matcher (V(cluster="prod"), V(Hostname=~"gpu-.*")).
    type: list
    elements: str
    default: []
  nodes:
    description: Only these nodes (their C(Hostname) label, the Kubernetes node name). A node without series fails.
    type: list
    elements: str
  series:
    description:
      - Also return, per GPU and MIG instance, C(series) - its SM activity and memory over the window in buckets
        aligned to the Unix epoch, the smallest of 5, 10, 15, 30 minutes, 1, 2, 3, 6, 12 hours, 1 day not below the
        step that keeps the window within 170 points (a week - hourly), each bucket the mean of SM activity and the max
        of memory used.
      - Off by default to keep the result small (about 170 points per device and figure when on).
    type: bool
    default: false
  advise:
    description: Also return RV(advice). A GPU observed for fewer than O(thresholds.min_hours) then fails the module.
    type: bool
    default: true
  pools:
    description: Advise per pool instead of per node, a mapping of pool names to lists of node names.
    type: dict
  thresholds:
    description: The advice's thresholds (ratios are 0 to 1).
    type: dict
    default: {}
    suboptions:
      min_hours:
        description: Hours a GPU must have been observed; fewer refuses the advice (6 of 7 days by default).
        type: float
        default: 144
      share_sm:
        description: Mean SM activity at or below which a GPU is a candidate for time-slicing (the seed articles' 8 %).
        type: float
        default: 0.08
      share_memory:
        description: p95 memory used at or below which it is (the seed articles' 15 %).
        type: float
        default: 0.15
      saturated_sm:
        description: p95 SM activity from which a GPU is saturated and not shared (the seed articles' 85 %).
        type: float
        default: 0.85
      saturated_memory:
        description: p95 memory used from which a GPU is saturated.
        type: float
        default: 0.85
      headroom:
        description: Added to the largest workload's peak memory when sizing replicas and MIG instances (V(0.2) is 20 %).
        type: float
        default: 0.2
      min_slices:
        description: Smallest MIG profile, in compute slices (V(2) - no 1g profile unless asked).
        type: int
        default: 2
      max_replicas:
        description: Most time-slicing replicas per GPU.
        type: int
        default: 8
notes:
  - dcgm-exporter's default counters (C(etc/default-counters.csv)) leave C(DCGM_FI_PROF_SM_ACTIVE) and
    C(DCGM_FI_PROF_SM_OCCUPANCY) commented out; the module fails naming them until they are enabled.
  - The module only reads; check mode runs the same queries.
"""

EXAMPLES = r"""
- name: A week of GPU use on the inference nodes, and what to do with them
  gpuops.provision.gpu_usage_info:
    url: https://prometheus.example.com:9090
    bearer_token: "{{ vault_prometheus_token }}"
    ca_path: /etc/ssl/example-ca.pem
    window: 7d
    pools:
      inference: [gpu-node-1, gpu-node-2]
  register: usage

- name: The proposed pool and MIG configuration
  ansible.builtin.debug:
    msg: "{{ usage.advice | map(attribute='pool') }}"
"""

RETURN = r"""
gpus:
  description:
    - Per GPU and per MIG instance - C(host), C(gpu), C(uuid), C(model), C(mig_profile), C(gi_id), C(hours),
      C(samples), C(sm_active), C(sm_occupancy), C(dram_active), C(memory_used) (ratios), C(gpu_util) (percent or
      null), C(fb_used_mib), each C({mean, p95, max}); C(fb_total_mib); C(pods) (C(namespace), C(pod), C(container),
      C(fb_used_max_mib)); C(namespaces); C(max_concurrent_pods).
    - C(hours_with_pods) - hours in which a series of the device carried a pod; C(namespace_hours) - per namespace,
      the hours in which one carried a pod of it (several pods of a namespace in one step count once; on a shared GPU
      each namespace seen in a step is charged the step).
    - With O(series=true), C(series) - C(bucket) (seconds), C(t) (bucket starts, Unix seconds), C(sm_active) (mean
      ratio per bucket), C(fb_used_mib) (max per bucket), C(memory_used) (that max over C(fb_total_mib)); a bucket
      without samples of one figure holds null there.
  returned: always
  type: list
  elements: dict
gpu_hours:
  description:
    - GPU-hours per profile, not per card - every GPU or MIG instance counts one hour per hour observed (C(hours)); a
      GPU without MIG as profile V(whole) of its model, a MIG instance as its own profile (one hour of a 3g.40gb
      instance is one 3g.40gb GPU-hour, whatever else the card runs), the MIG card itself not beside its instances.
    - C(by_profile) - C(model), C(profile), C(devices), C(hours), C(hours_with_pods); C(by_namespace) - C(model),
      C(profile), C(namespace) (empty for pods without one), C(hours) (the devices' C(namespace_hours) summed; a
      shared GPU charges each namespace it ran in a step, so they may add up to more than C(hours)).
  returned: always
  type: dict
  sample: {by_profile: [{model: NVIDIA H100 80GB HBM3, profile: 3g.40gb, devices: 2, hours: 336.1667,
           hours_with_pods: 300.0}], by_namespace: [{model: NVIDIA H100 80GB HBM3, profile: 3g.40gb,
           namespace: serving, hours: 300.0}]}
advice:
  description:
    - Per node or pool - C(name), C(nodes), C(advice) (V(saturated), V(time-slicing), V(mig) or V(whole)), C(action),
      C(rule), C(reason) (the rule with its numbers), C(figures), C(thresholds), C(pool) (a gpu_pools pool),
      C(mig_config) (a mig-parted v1 document, or null), C(devices).
  returned: when O(advise=true)
  type: list
  elements: dict
window:
  description: C(start), C(end) (Unix seconds), C(step) and, with O(series=true), the charts' C(bucket) (seconds) of the read.
  returned: always
  type: dict
queries:
  description: The PromQL of each figure, by figure name.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds
from ansible_collections.gpuops.provision.plugins.module_utils._usage import advice, prometheus, series as usage_series
from ansible_collections.gpuops.provision.plugins.module_utils._common.connection import prometheus_argument_spec

THRESHOLDS = dict(min_hours=dict(type="float", default=144.0), share_sm=dict(type="float", default=0.08),
                  share_memory=dict(type="float", default=0.15), saturated_sm=dict(type="float", default=0.85),
                  saturated_memory=dict(type="float", default=0.85), headroom=dict(type="float", default=0.2),
                  min_slices=dict(type="int", default=2), max_replicas=dict(type="int", default=8))


def main():
    spec = prometheus_argument_spec()
    spec.update(window=dict(type="str", default="7d"), end=dict(type="float"), step=dict(type="int"),
                match=dict(type="list", elements="str", default=[]), nodes=dict(type="list", elements="str"),
                advise=dict(type="bool", default=True), pools=dict(type="dict"), series=dict(type="bool", default=False),
                thresholds=dict(type="dict", default={}, options=THRESHOLDS))
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    problems = bounds.out_of_range(p, {"api_timeout": bounds.API_TIMEOUT})
    if problems:
        module.fail_json(msg="; ".join(problems))
    try:
        client = prometheus.Client(p)
        if client.warning:
            module.warn(client.warning)
        read = prometheus.read_usage(client, usage_series.parse_duration(p["window"]), p["end"], p["step"],
                                     usage_series.check_matchers(p["match"]), p["nodes"], p["series"])
        window = dict(start=read["start"], end=read["end"], step=read["step"])
        if p["series"]:
            window["bucket"] = read["bucket"]
        result = dict(changed=False, gpus=read["gpus"], queries=read["queries"], gpu_hours=read["gpu_hours"], window=window)
        if p["advise"]:
            result["advice"] = advice.advise_all(read["gpus"], p["pools"], p["thresholds"])
    except (prometheus.PrometheusError, usage_series.UsageError, advice.AdviceError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
