"""Fusion: plans (partitions into kernels), legality, transformations, planners."""
from .plan import Group, Plan, StitchScheme, make_group
from .planners import PLANNERS, Decision, run_planner
from .schedule import GroupIO, Schedule, analyze, group_io

__all__ = ["Decision", "Group", "GroupIO", "PLANNERS", "Plan", "Schedule", "StitchScheme",
           "analyze", "group_io", "make_group", "run_planner"]
