"""Conformance checks of loading, registrations and device enumeration."""
from __future__ import annotations

from ...framework import registry
from ...plugins import loader
from ...runtime import placement
from .results import CheckSkipped, expect


def devices_of_type(device_type: str) -> list:
    return [d for d in loader.devices() if d.device_type == device_type]



class AbiChecks:
    """Checks of the plugin as a whole (mixed into ``Suite``)."""

    def check_load(self) -> str:
        self.rec = loader.load_plugin(self.path)
        r = self.rec
        expect(r.status == "loaded", f"{r.status}: {r.reason}")
        return (f"ABI {r.abi_version or '-'}, platform {r.platform_name or '-'}, device type "
                f"{r.device_type or '- (kernel-only plugin)'}, {r.device_count} device(s), "
                f"{r.kernels} kernel(s), {r.ops} op(s)")

    def check_registrations(self) -> str:
        r = self.rec
        expect(not r.rejected, f"{len(r.rejected)} registration(s) rejected: "
                + "; ".join(r.rejected))
        return f"{r.kernels} kernel(s) and {r.ops} op(s) accepted"

    def check_devices(self) -> str:
        r = self.rec
        if r.device_type is None:
            targets = sorted({k.device_type for ks in registry.KERNELS.values() for k in ks
                              if k.plugin is r})
            present = [t for t in targets if devices_of_type(t)]
            expect(not targets or present,
                    f"kernel-only plugin (no SE_InitPlugin): its kernels target "
                    f"{', '.join(targets)}, but no such device is loaded; name the device "
                    "plugin with --with PATH")
            raise CheckSkipped("kernel-only plugin (no SE_InitPlugin): no devices of its own; "
                               f"kernels run on {', '.join(present) or 'nothing'}")
        expect(r.device_count > 0,
                "the plugin reports 0 devices, so no device check can run; run the suite "
                "where the plugin finds its hardware")
        devs = r.devices
        expect(len(devs) == r.device_count, f"{len(devs)} device objects for a count of "
                f"{r.device_count}")
        listed = {d.name for d in placement.list_physical_devices(r.device_type)}
        for i, d in enumerate(devs):
            expect(d.ordinal == i, f"device {i} has ordinal {d.ordinal}")
            expect(d.device_type == r.device_type, f"device {i} has type {d.device_type}")
            expect(placement.get_device(f"{r.device_type}:{i}") is d,
                    f"pg.get_device('{r.device_type}:{i}') does not return device {i}")
            expect(f"/physical_device:{r.device_type}:{i}" in listed,
                    f"{r.device_type}:{i} is missing from pg.list_physical_devices()")
            mem = d.memory_usage()
            if mem is not None:
                free, total = mem
                expect(0 <= free <= total, f"{d.short_name}: device_memory_usage reports "
                        f"free={free} total={total} (need 0 <= free <= total)")
        self.dev = devs[0]
        d = self.dev
        return (f"{len(devs)} device(s); {d.short_name}: {d.hardware_name or '?'} "
                f"({d.vendor or '?'})")

    # --- memory ----------------------------------------------------------
