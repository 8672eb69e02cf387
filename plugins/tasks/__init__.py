"""Built-in task metrics (entry-point group ``trt_orchestrator.tasks``): classification top-1/top-5, CTC text
recognition, text detection (probability map -> mask and boxes). Pure numpy; see ``orchestrator.contracts.task``."""
