"""The descriptor pool of the generated ``*_pb2`` modules.

setup.py points each module at this pool instead of protobuf's default one,
so TensorFlow's generated classes, which define the same names there, can be
imported in the same process.  protobuf's well-known types that our files
import (``google.protobuf.Any``, ``BoolValue``) are added to it first."""
from google.protobuf import descriptor_pool
from google.protobuf.runtime_version import VersionError

POOL = descriptor_pool.DescriptorPool()
try:
    from google.protobuf import any_pb2, wrappers_pb2
except VersionError:
    # a protobuf older than its own generated modules: each of our modules
    # then refuses to load with its own version check, which says what to do
    pass
else:
    for _file in (any_pb2.DESCRIPTOR, wrappers_pb2.DESCRIPTOR):
        POOL.AddSerializedFile(_file.serialized_pb)
