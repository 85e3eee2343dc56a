"""Fusion: plans (partitions into kernels), legality, transformations, planners."""
from .plan import Group, Plan, StitchScheme, make_group
from .cost import CostModel, Estimate, Factors, PlanEstimate, Sample
from .features import KernelFeatures
from .geometry import Geometry, geometry
from .mapping import MAPPINGS, Mapping, ScheduleKind, choose_mapping
from .partition import Decision
from .planners import PLANNERS, run_planner
from .analysis import analyze
from .phases import analyze_stitched
from .rows import candidate_mappings
from .schedule import GroupIO, Phase, Schedule, group_io

__all__ = ["CostModel", "Decision", "Estimate",
           "Factors", "Geometry", "Group", "GroupIO", "KernelFeatures", "MAPPINGS",
           "Mapping", "PLANNERS", "Phase", "Plan", "PlanEstimate", "Sample", "Schedule",
           "ScheduleKind", "StitchScheme", "analyze", "analyze_stitched",
           "candidate_mappings", "choose_mapping", "geometry", "group_io", "make_group",
           "run_planner"]
