/* A correct plugin: device type MINI with one Neg kernel. It must load and
 * pass the conformance suite (the control for the broken plugins here). */
#include "mini_device.h"
