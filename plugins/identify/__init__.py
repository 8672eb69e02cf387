"""Identifiers (entry-point group ``trt_orchestrator.identifiers``): what a file is, from its bytes alone."""
