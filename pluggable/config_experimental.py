"""``pg.config.experimental``: TensorFlow's ``tf.config.experimental`` device
functions (re-exports of ``pluggable.runtime.device_config``)."""
from .framework.config import (  # noqa: F401
    enable_tensor_float_32_execution, tensor_float_32_execution_enabled)
from .runtime.device_config import (  # noqa: F401
    LogicalDeviceConfiguration, get_memory_growth, get_memory_info, reset_memory_stats,
    set_memory_growth)
from .runtime.device_config import (  # noqa: F401
    LogicalDeviceConfiguration as VirtualDeviceConfiguration,
    get_logical_device_configuration as get_virtual_device_configuration,
    set_logical_device_configuration as set_virtual_device_configuration)
from .runtime.device_config import get_visible_devices, set_visible_devices  # noqa: F401
from .runtime.placement import list_physical_devices  # noqa: F401
