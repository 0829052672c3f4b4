"""gpusim's profile naming for the device-plugin view (lab code reading lab code; the product never does this)."""

from __future__ import annotations

import importlib.util
import os
import sys

DEFAULT_MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpusim", "gpusim", "models.py")


def gpusim_namer(models_path=None):
    """Profile names for gpusim's id-only state, from gpusim's own model table (lab code; None if absent)."""
    models_path = models_path or DEFAULT_MODELS
    if not os.path.exists(models_path):
        return None
    spec = importlib.util.spec_from_file_location("_k8slab_gpusim_models", models_path)
    models = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = models  # dataclasses resolve their module through sys.modules
    try:
        spec.loader.exec_module(models)
    except Exception as exc:  # pylint: disable=broad-except
        print(f"k8s lab: cannot load gpusim model table {models_path}: {exc}", file=sys.stderr)
        return None

    def namer(model_name, gi, ci):
        model = models.MODELS.get(model_name)
        prof = models.gi_profile_by_id(model, gi.get("profile_id")) if model else None
        if prof is None:
            return None
        if ci is None:
            return models.gi_name(model, prof)
        slices = ci.get("slices") or {v: k for k, v in models.CI_INDEX_BY_SLICES.items()}.get(ci.get("profile_id"), prof.slices)
        return models.ci_name(model, prof, slices)
    return namer
