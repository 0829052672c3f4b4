# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes API connection options of the collection's own Kubernetes modules (private fragment); matches
module_utils/_k8s/api.py ARGUMENT_SPEC."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path of the kubeconfig. Default is E(K8S_AUTH_KUBECONFIG) (as C(kubernetes.core) reads it), then
        C(~/.kube/config), then the in-cluster service account.
      - TLS is verified as the kubeconfig says (verification on unless it sets C(insecure-skip-tls-verify)).
    type: path
  context:
    description:
      - Context of the kubeconfig. Default is E(K8S_AUTH_CONTEXT), then the kubeconfig's current context.
    type: str
  timeout:
    description:
      - Seconds per API request.
    type: int
    default: 30
requirements:
  - kubernetes (Python client) on the host that runs the module
"""
