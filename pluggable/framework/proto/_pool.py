"""The descriptor pool of the generated ``*_pb2`` modules.

setup.py points each module at this pool instead of protobuf's default one,
so TensorFlow's generated classes, which define the same names there, can be
imported in the same process."""
from google.protobuf import descriptor_pool

POOL = descriptor_pool.DescriptorPool()
