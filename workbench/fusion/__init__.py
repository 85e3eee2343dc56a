"""Fusion: plans (partitions into kernels), legality, transformations, planners."""
from .plan import Group, Plan, StitchScheme, make_group
from .cost import CostModel, Estimate, Factors, KernelFeatures, PlanEstimate, Sample
from .devices import A100, H100, Device
from .planners import PLANNERS, Decision, run_planner
from .schedule import (MAPPINGS, GroupIO, Phase, Schedule, analyze, analyze_stitched,
                       candidate_mappings, choose_mapping, group_io)

__all__ = ["A100", "CostModel", "Decision", "Device", "Estimate", "Factors", "Group",
           "H100", "KernelFeatures", "PlanEstimate", "Sample", "GroupIO", "MAPPINGS",
           "PLANNERS", "Phase", "Plan", "Schedule",
           "StitchScheme", "analyze", "analyze_stitched", "candidate_mappings",
           "choose_mapping", "group_io", "make_group", "run_planner"]
