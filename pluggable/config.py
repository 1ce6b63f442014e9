"""``pg.config``: process-wide settings and device queries (public names only;
the settings live in ``pluggable.framework.config``, device details in
``pluggable.runtime.placement``, device configuration in
``pluggable.runtime.device_config``)."""
from . import config_experimental as experimental  # noqa: F401
from .framework.config import (  # noqa: F401
    enable_tensor_float_32_execution, get_log_device_placement, get_soft_device_placement,
    placement_log, set_log_device_placement, set_soft_device_placement,
    tensor_float_32_execution_enabled)
from .runtime.device import PhysicalDevice  # noqa: F401
from .runtime.device_config import (  # noqa: F401
    LogicalDevice, LogicalDeviceConfiguration, get_logical_device_configuration,
    get_visible_devices, list_logical_devices, set_logical_device_configuration,
    set_visible_devices)
from .runtime.placement import get_device_details, list_physical_devices  # noqa: F401
from .plugins.graph_optimizers import enabled as graph_optimizers_enabled  # noqa: F401
from .plugins.graph_optimizers import set_enabled as set_graph_optimizers_enabled  # noqa: F401
from ._lazy import lazy_exports as _lazy_exports

# The graph layer is imported when one of its settings is first used.
__getattr__, __dir__ = _lazy_exports(globals(), {
    "get_graph_capture": (".graph.device_capture", "get_graph_capture"),
    "set_graph_capture": (".graph.device_capture", "set_graph_capture"),
    "run_functions_eagerly": (".graph.function", "run_functions_eagerly"),
    "functions_run_eagerly": (".graph.function", "functions_run_eagerly"),
    "graph_fusion_enabled": (".graph.fusion", "enabled"),
    "set_graph_fusion_enabled": (".graph.fusion", "set_enabled"),
})
