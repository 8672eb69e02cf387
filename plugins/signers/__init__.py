"""Signers (entry-point group ``trt_orchestrator.signers``): sign an artifact's in-toto statement at publish and
verify it at pull (``orchestrator.contracts.signer``)."""
