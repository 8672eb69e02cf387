"""trtexec's option names per TensorRT OSS tag: what ``samples/common/sampleOptions.cpp`` (and ``trtexec.cpp``) of
https://github.com/NVIDIA/TensorRT parse at each tag (``SOURCE`` names the file at a tag).

The same lists, with the URL of each tag's file, are carried as data in tests/conformance/data/trtexec_options.json;
tests/conformance/test_trtexec_options.py checks that this table equals them and that every flag
``builders/trtexec.py`` emits is in the set of the tag a release maps to (``tag_for``). Data only.
"""

from __future__ import annotations

from orchestrator.core.versions import parse_version

SOURCE = "https://github.com/NVIDIA/TensorRT/blob/{tag}/samples/common/sampleOptions.cpp"
# tag -> option names (each with its leading "--"), read at that tag
_RAW: dict[str, str] = {
    "v8.6.1": (
        "allowGPUFallback avgRuns avgTiming batch best buildDLAStandalone buildOnly builderOptimizationLevel "
        "calib consistency deploy device directIO dumpLayerInfo dumpOutput dumpProfile dumpRawBindingsToFile "
        "dumpRefit duration dynamicPlugins excludeLeanRuntime explicitBatch explicitPrecision exportLayerInfo "
        "exportOutput exportProfile exportTimes exposeDMA fp16 fp8 hardwareCompatibilityLevel help heuristic "
        "idleTime ignoreParsedPluginLibs infStreams int8 iterations leanDLLPath loadEngine loadInputs "
        "maxAuxStreams maxBatch maxShapes maxShapesCalib memPoolSize minShapes minShapesCalib minTiming model "
        "noBuilderCache noDataTransfers noTF32 nvtxMode onnx optShapes optShapesCalib output percentile "
        "persistentCacheRatio plugins precisionConstraints preview profilingVerbosity refit restricted safe "
        "saveEngine separateProfileRun setPluginsToSerialize shapes skipInference sleepTime sparsity "
        "staticPlugins streams tacticSources tempdir threads timeDeserialize timeRefit timingCacheFile uff "
        "uffInput uffNHWC useCudaGraph useDLACore useManagedMemory useRuntime useSpinWait vc verbose "
        "versionCompatible warmUp workspace "
    ),
    "v10.0.1": (
        "allocationStrategy allowGPUFallback allowWeightStreaming avgRuns avgTiming best bf16 buildDLAStandalone "
        "builderOptimizationLevel calib calibProfile consistency device directIO dumpLayerInfo "
        "dumpOptimizationProfile dumpOutput dumpProfile dumpRawBindingsToFile dumpRefit duration dynamicPlugins "
        "errorOnTimingCacheMiss excludeLeanRuntime exportLayerInfo exportOutput exportProfile exportTimes "
        "exposeDMA fp16 fp8 getPlanVersionOnly hardwareCompatibilityLevel help idleTime ignoreParsedPluginLibs "
        "infStreams int8 iterations leanDLLPath loadEngine loadInputs maxAuxStreams maxShapes maxShapesCalib "
        "memPoolSize minShapes minShapesCalib noBuilderCache noCompilationCache noDataTransfers noTF32 onnx "
        "optShapes optShapesCalib percentile persistentCacheRatio pi pluginInstanceNorm plugins "
        "precisionConstraints preview profile profilingVerbosity refit restricted safe saveDebugTensors "
        "saveEngine separateProfileRun setPluginsToSerialize shapes skipInference sleepTime sparsity "
        "staticPlugins streams stripWeights stronglyTyped tacticSources tempdir threads timeDeserialize timeRefit "
        "timingCacheFile useCudaGraph useDLACore useManagedMemory useProfile useRuntime useSpinWait vc verbose "
        "versionCompatible warmUp weightStreamingBudget weightless "
    ),
    "v10.1.0": (
        "allocationStrategy allowGPUFallback allowWeightStreaming avgRuns avgTiming best bf16 buildDLAStandalone "
        "builderOptimizationLevel calib calibProfile consistency device directIO dumpLayerInfo "
        "dumpOptimizationProfile dumpOutput dumpProfile dumpRawBindingsToFile dumpRefit duration dynamicPlugins "
        "errorOnTimingCacheMiss excludeLeanRuntime exportLayerInfo exportOutput exportProfile exportTimes "
        "exposeDMA fp16 fp8 getPlanVersionOnly hardwareCompatibilityLevel help idleTime ignoreParsedPluginLibs "
        "infStreams int4 int8 iterations leanDLLPath loadEngine loadInputs maxAuxStreams maxShapes maxShapesCalib "
        "memPoolSize minShapes minShapesCalib noBuilderCache noCompilationCache noDataTransfers noTF32 onnx "
        "optShapes optShapesCalib percentile persistentCacheRatio pi pluginInstanceNorm plugins "
        "precisionConstraints preview profile profilingVerbosity refit restricted safe saveDebugTensors "
        "saveEngine separateProfileRun setPluginsToSerialize shapes skipInference sleepTime sparsity "
        "staticPlugins streams stripAllWeights stripWeights stronglyTyped tacticSources tempdir threads "
        "timeDeserialize timeRefit timingCacheFile useCudaGraph useDLACore useManagedMemory useProfile useRuntime "
        "useSpinWait vc verbose versionCompatible warmUp weightStreamingBudget weightless "
    ),
    "v10.7.0": (
        "allocationStrategy allowGPUFallback allowWeightStreaming asyncFileReader avgRuns avgTiming best bf16 "
        "buildDLAStandalone builderOptimizationLevel calib calibProfile device directIO dumpLayerInfo "
        "dumpOptimizationProfile dumpOutput dumpProfile dumpRawBindingsToFile dumpRefit duration dynamicPlugins "
        "errorOnTimingCacheMiss excludeLeanRuntime exportLayerInfo exportOutput exportProfile exportTimes "
        "exposeDMA fp16 fp8 getPlanVersionOnly hardwareCompatibilityLevel help idleTime ignoreParsedPluginLibs "
        "infStreams int4 int8 iterations leanDLLPath loadEngine loadInputs maxAuxStreams maxShapes maxShapesCalib "
        "maxTactics memPoolSize minShapes minShapesCalib monitorMemory noBuilderCache noCompilationCache "
        "noDataTransfers noTF32 onnx optShapes optShapesCalib percentile persistentCacheRatio pi "
        "pluginInstanceNorm plugins precisionConstraints preview profile profilingVerbosity refit restricted "
        "runtimePlatform safe saveDebugTensors saveEngine separateProfileRun setPluginsToSerialize shapes "
        "skipInference sleepTime sparsity staticPlugins streams stripAllWeights stripWeights stronglyTyped "
        "tacticSources tempdir threads timeDeserialize timeRefit timingCacheFile useCudaGraph useDLACore "
        "useManagedMemory useProfile useRuntime useSpinWait vc verbose versionCompatible warmUp "
        "weightStreamingBudget weightless "
    ),
    "v10.8.0": (
        "allocationStrategy allowGPUFallback allowWeightStreaming asyncFileReader avgRuns avgTiming best bf16 "
        "buildDLAStandalone builderOptimizationLevel calib calibProfile device directIO dumpLayerInfo "
        "dumpOptimizationProfile dumpOutput dumpProfile dumpRawBindingsToFile dumpRefit duration dynamicPlugins "
        "errorOnTimingCacheMiss excludeLeanRuntime exportLayerInfo exportOutput exportProfile exportTimes "
        "exposeDMA fp16 fp8 getPlanVersionOnly hardwareCompatibilityLevel help idleTime ignoreParsedPluginLibs "
        "infStreams int4 int8 iterations l2LimitForTiling leanDLLPath loadEngine loadInputs maxAuxStreams "
        "maxShapes maxShapesCalib maxTactics memPoolSize minShapes minShapesCalib monitorMemory noBuilderCache "
        "noCompilationCache noDataTransfers noTF32 onnx optShapes optShapesCalib percentile persistentCacheRatio "
        "pi pluginInstanceNorm plugins precisionConstraints preview profile profilingVerbosity refit restricted "
        "runtimePlatform safe saveDebugTensors saveEngine separateProfileRun setPluginsToSerialize shapes "
        "skipInference sleepTime sparsity staticPlugins streams stripAllWeights stripWeights stronglyTyped "
        "tacticSources tempdir threads tilingOptimizationLevel timeDeserialize timeRefit timingCacheFile "
        "useCudaGraph useDLACore useManagedMemory useProfile useRuntime useSpinWait vc verbose versionCompatible "
        "warmUp weightStreamingBudget weightless "
    ),
    "v10.9.0": (
        "allocationStrategy allowGPUFallback allowWeightStreaming asyncFileReader avgRuns avgTiming best bf16 "
        "buildDLAStandalone builderOptimizationLevel calib calibProfile device directIO dumpLayerInfo "
        "dumpOptimizationProfile dumpOutput dumpProfile dumpRawBindingsToFile dumpRefit duration dynamicPlugins "
        "errorOnTimingCacheMiss excludeLeanRuntime exportLayerInfo exportOutput exportProfile exportTimes "
        "exposeDMA fp16 fp8 getPlanVersionOnly hardwareCompatibilityLevel help idleTime ignoreParsedPluginLibs "
        "infStreams int4 int8 iterations l2LimitForTiling leanDLLPath loadEngine loadInputs maxAuxStreams "
        "maxShapes maxShapesCalib maxTactics memPoolSize minShapes minShapesCalib monitorMemory noBuilderCache "
        "noCompilationCache noDataTransfers noTF32 onnx optShapes optShapesCalib percentile persistentCacheRatio "
        "pi pluginInstanceNorm plugins precisionConstraints preview profile profilingVerbosity refit restricted "
        "runtimePlatform safe saveDebugTensors saveEngine separateProfileRun setPluginsToSerialize shapes "
        "skipInference sleepTime sparsity staticPlugins streams stripAllWeights stripWeights stronglyTyped "
        "tacticSources tempdir threads tilingOptimizationLevel timeDeserialize timeRefit timingCacheFile "
        "useCudaGraph useDLACore useManagedMemory useProfile useRuntime useSpinWait vc verbose versionCompatible "
        "warmUp weightStreamingBudget weightless "
    ),
    "v10.12.0": (
        "allocationStrategy allowGPUFallback allowWeightStreaming asyncFileReader avgRuns avgTiming best bf16 "
        "buildDLAStandalone builderOptimizationLevel calib calibProfile device directIO distributiveIndependence "
        "dumpLayerInfo dumpOptimizationProfile dumpOutput dumpProfile dumpRawBindingsToFile dumpRefit duration "
        "dynamicPlugins errorOnTimingCacheMiss excludeLeanRuntime exportLayerInfo exportOutput exportProfile "
        "exportTimes exposeDMA fp16 fp8 getPlanVersionOnly hardwareCompatibilityLevel help idleTime "
        "ignoreParsedPluginLibs infStreams int4 int8 iterations l2LimitForTiling leanDLLPath loadEngine "
        "loadInputs markDebug markUnfusedTensorsAsDebugTensors maxAuxStreams maxShapes maxShapesCalib maxTactics "
        "memPoolSize minShapes minShapesCalib monitorMemory noBuilderCache noCompilationCache noDataTransfers "
        "noTF32 onnx optShapes optShapesCalib percentile persistentCacheRatio pi pluginInstanceNorm plugins "
        "precisionConstraints preview profile profilingVerbosity refit restricted runtimePlatform safe "
        "saveAllDebugTensors saveDebugTensors saveEngine separateProfileRun setPluginsToSerialize shapes "
        "skipInference sleepTime sparsity staticPlugins streams stripAllWeights stripWeights stronglyTyped "
        "tacticSources tempdir threads tilingOptimizationLevel timeDeserialize timeRefit timingCacheFile "
        "uint8AsymmetricQuantizationDLA useCudaGraph useDLACore useManagedMemory useProfile useRuntime "
        "useSpinWait vc verbose versionCompatible warmUp weightStreamingBudget weightless "
    ),
    "v10.13.3": (
        "allocationStrategy allowGPUFallback allowWeightStreaming asyncFileReader avgRuns avgTiming best bf16 "
        "buildDLAStandalone builderOptimizationLevel calib calibProfile consistency device directIO "
        "distributiveIndependence dumpKernelText dumpLayerInfo dumpOptimizationProfile dumpOutput dumpProfile "
        "dumpRawBindingsToFile dumpRefit duration dynamicPlugins errorOnTimingCacheMiss excludeLeanRuntime "
        "exportLayerInfo exportOutput exportProfile exportTimes exposeDMA fp16 fp8 getPlanVersionOnly "
        "hardwareCompatibilityLevel help idleTime ignoreParsedPluginLibs infStreams int4 int8 iterations "
        "l2LimitForTiling leanDLLPath loadEngine loadInputs markDebug markUnfusedTensorsAsDebugTensors "
        "maxAuxStreams maxShapes maxShapesCalib maxTactics memPoolSize minShapes minShapesCalib monitorMemory "
        "noBuilderCache noCompilationCache noDataTransfers noTF32 onnx optShapes optShapesCalib percentile "
        "persistentCacheRatio pi pluginInstanceNorm plugins precisionConstraints preview profile "
        "profilingVerbosity refit remoteAutoTuningConfig restricted runtimePlatform safe safetyPlugins "
        "saveAllDebugTensors saveDebugTensors saveEngine separateProfileRun setPluginsToSerialize shapes "
        "skipInference sleepTime sparsity staticPlugins streams stripAllWeights stripWeights stronglyTyped "
        "tacticSources tempdir threads tilingOptimizationLevel timeDeserialize timeRefit timingCacheFile "
        "uint8AsymmetricQuantizationDLA useCudaGraph useDLACore useManagedMemory useProfile useRuntime "
        "useSpinWait vc verbose versionCompatible warmUp weightStreamingBudget weightless "
    ),
    "v10.16": (
        "adjustForDLA allocationStrategy allowGPUFallback allowWeightStreaming asyncFileReader avgRuns avgTiming "
        "best bf16 buildDLAStandalone builderOptimizationLevel calib calibProfile consistency cpuOnly device "
        "directIO distributiveIndependence dumpKernelText dumpLayerInfo dumpOptimizationProfile dumpOutput "
        "dumpProfile dumpRawBindingsToFile dumpRefit duration dynamicPlugins enablePluginOverride "
        "errorOnTimingCacheMiss excludeLeanRuntime exportLayerInfo exportOutput exportProfile exportTimes "
        "exposeDMA fp16 fp8 getPlanVersionOnly hardwareCompatibilityLevel help idleTime ignoreParsedPluginLibs "
        "infStreams int4 int8 iterations l2LimitForTiling leanDLLPath loadEngine loadInputs markDebug "
        "markUnfusedTensorsAsDebugTensors maxAuxStreams maxShapes maxShapesCalib maxTactics memPoolSize minShapes "
        "minShapesCalib monitorMemory noBuilderCache noCompilationCache noDataTransfers noTF32 onnx optShapes "
        "optShapesCalib percentile persistentCacheRatio pi pluginInstanceNorm plugins precisionConstraints "
        "preview profile profilingVerbosity refit refitFromOnnx remoteAutoTuningConfig reportCapabilityDLA "
        "restricted runtimePlatform safe safetyPlugins saveAllDebugTensors saveDebugTensors saveEngine "
        "separateProfileRun setPluginsToSerialize shapes skipInference sleepTime sparsity staticPlugins streams "
        "stripAllWeights stripWeights stronglyTyped tacticSources tempdir threads tilingOptimizationLevel "
        "timeDeserialize timeRefit timingCacheFile uint8AsymmetricQuantizationDLA useCudaGraph useDLACore "
        "useManagedMemory useProfile useRuntime useSpinWait vc verbose versionCompatible warmUp "
        "weightStreamingBudget weightless "
    ),
    "v11.0": (
        "adjustForDLA allocationStrategy allowGPUFallback allowWeightStreaming asyncFileReader avgRuns avgTiming "
        "buildDLAStandalone builderOptimizationLevel consistency cpuOnly device directIO distributiveIndependence "
        "dumpKernelText dumpLayerInfo dumpOptimizationProfile dumpOutput dumpProfile dumpRawBindingsToFile "
        "dumpRefit duration dynamicPlugins enablePluginOverride errorOnTimingCacheMiss excludeLeanRuntime "
        "exportLayerInfo exportOutput exportProfile exportTimes exposeDMA getPlanVersionOnly "
        "hardwareCompatibilityLevel help idleTime ignoreParsedPluginLibs includeDataTransfers infStreams "
        "iterations l2LimitForTiling leanDLLPath loadEngine loadInputs markDebug markUnfusedTensorsAsDebugTensors "
        "maxAuxStreams maxShapes maxTactics memPoolSize minShapes monitorMemory noBuilderCache noCompilationCache "
        "noCudaGraph noDataTransfers noSpinWait noTF32 onnx optShapes percentile persistentCacheRatio pi "
        "pluginInstanceNorm plugins preview profile profilingVerbosity refit refitFromOnnx remoteAutoTuningConfig "
        "reportCapabilityDLA runtimePlatform safe safetyPlugins saveAllDebugTensors saveDebugTensors saveEngine "
        "separateProfileRun setPluginsToSerialize shapes skipInference sleepTime sparsity staticPlugins streams "
        "stripAllWeights stripWeights stronglyTyped tacticSources tempdir threads tilingOptimizationLevel "
        "timeDeserialize timeRefit timingCacheFile uint8AsymmetricQuantizationDLA useCudaGraph useDLACore "
        "useManagedMemory useProfile useRuntime useSpinWait vc verbose versionCompatible warmUp "
        "weightStreamingBudget "
    ),
    "v11.1": (
        "accuracyAlgorithm accuracyThreshold adjustForDLA allocationStrategy allowGPUFallback "
        "allowWeightStreaming asyncFileReader atol avgRuns avgTiming buildDLAStandalone builderOptimizationLevel "
        "consistency continue cpuOnly device directIO distributiveIndependence dryRun dumpKernelText "
        "dumpLayerInfo dumpOptimizationProfile dumpOutput dumpProfile dumpRawBindingsToFile dumpRefit duration "
        "dynamicPlugins enablePluginOverride errorOnTimingCacheMiss excludeLeanRuntime exportLayerInfo "
        "exportOutput exportProfile exportTimes exposeDMA getPlanVersionOnly hardwareCompatibilityLevel help "
        "helpBuildRoute idleTime ignoreParsedPluginLibs includeDataTransfers infStreams iterations "
        "l2LimitForTiling leanDLLPath loadEngine loadInputs loadRefOutputs markDebug "
        "markUnfusedTensorsAsDebugTensors maxAuxStreams maxShapes maxTactics memPoolSize minShapes monitorMemory "
        "noBuilderCache noCompilationCache noCudaGraph noDataTransfers noSpinWait noTF32 onnx optShapes "
        "percentile persistentCacheRatio pi pluginInstanceNorm plugins preview profile profilingVerbosity refPair "
        "refit refitFromOnnx remoteAutoTuningConfig reportCapabilityDLA rtol runtimePlatform safe safetyPlugins "
        "saveAllDebugTensors saveAllEngines saveDebugTensors saveEngine separateProfileRun setBuildRoute "
        "setPluginsToSerialize shapes skipInference sleepTime sparsity staticPlugins streams stripAllWeights "
        "stripWeights stronglyTyped tacticSources tempdir threads tilingOptimizationLevel timeDeserialize "
        "timeRefit timingCacheFile tuneBuildRouteFile tuneBuildRoutes tuningCacheFile tuningResultFile "
        "tuningSearch tuningTimeOut uint8AsymmetricQuantizationDLA useCudaGraph useDLACore useManagedMemory "
        "useProfile useRuntime useSpinWait vc verbose versionCompatible warmUp weightStreamingBudget "
    ),
}
OPTIONS: dict[str, frozenset[str]] = {tag: frozenset("--" + n for n in raw.split()) for tag, raw in _RAW.items()}


def _tag_version(tag: str) -> tuple[int, ...]:
    return parse_version(tag.removeprefix("v"))


def tag_for(version: str) -> str:
    """The OSS tag whose option set applies to TensorRT ``version``: the newest tag of the same major release not
    newer than it (10.9.0.34 -> v10.9.0, 10.16.1.11 -> v10.16, 11.4.0.106 -> v11.1: the newest tag read). A version
    older than every tag of its major has none (KeyError)."""
    v = parse_version(version)
    fits = [t for t in OPTIONS if _tag_version(t)[0] == v[0] and _tag_version(t) <= v[: len(_tag_version(t))]]
    if not fits:
        raise KeyError(f"no trtexec option table for TensorRT {version} (tags: {', '.join(OPTIONS)})")
    return max(fits, key=_tag_version)


def options_for(version: str) -> frozenset[str]:
    """trtexec's option names at TensorRT ``version`` (see ``tag_for``)."""
    return OPTIONS[tag_for(version)]
