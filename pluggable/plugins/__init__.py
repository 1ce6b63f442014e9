"""Layer 4: plugins. Discovery, security policy, probing, loading, and the
records ``pg.plugins()`` reports.

Modules: ``discovery`` (where plugin files are found), ``security`` (the
allow-list and permission checks), ``probe`` (loading in a child process
first), ``registration`` (what the core calls when a plugin registers a
kernel or an op: validation and storage in the registry), ``records``
(``PluginRecord``), ``loader`` (``load_plugin``, ``ensure_loaded``) and
``cuda_env`` (helps the CUDA reference plugin find cuBLAS). The reference
plugins themselves are built into this directory. Imports ``runtime``,
``framework`` and ``_core`` only; the loader never imports dispatch, which
sees new kernels through the registry.

Search order (each file is loaded once, by its resolved real path, so a
symlink or a directory listed twice never loads a library twice):
  1. the directories and plugin files listed in the environment variable
     PLUGGABLE_PLUGIN_PATH (separated by os.pathsep; empty, relative and
     missing entries are ignored with a warning, so the current directory is
     never searched by accident);
  2. the package's own ``pluggable/plugins`` directory (the reference plugins);
  3. the per-user directory ``$XDG_DATA_HOME/pluggable/plugins`` (else
     ``$HOME/.local/share/pluggable/plugins``; only absolute ones);
  4. Python distributions on the absolute sys.path entries that are not the
     current directory (the directory of a script run as ``python
     script.py`` excepted: ``discovery.entry_point_path``) that advertise
     plugins through the entry point group ``pluggable.plugins``. The entry point's object is either a
     path (str or os.PathLike) or an iterable of paths, or a callable taking no
     arguments that returns one of those. Each path names a plugin file or a
     directory whose ``*.so`` files are plugins. Example (pyproject.toml)::

         [project.entry-points."pluggable.plugins"]
         my_device = "my_device_pkg:plugin_dir"   # a function returning a path

Within a directory, files are taken in name order. ``pg.load_plugin(path)``
loads one more file at run time. The current working directory is never
searched implicitly.

Environment variables:
  PLUGGABLE_DISABLE_PLUGINS=1        load no plugin at import
  PLUGGABLE_SKIP_PLUGINS=a.so,b.so   file names to skip
  PLUGGABLE_PLUGIN_ALLOWLIST=d1:d2   only open files whose real path lies inside
                                     one of these directories
  PLUGGABLE_ALLOW_INSECURE_PLUGINS=1 open files that are writable by group or
                                     others, or that sit in a world-writable
                                     directory (refused otherwise)
  PLUGGABLE_PROBE_PLUGINS=1          load each plugin in a subprocess first and
                                     quarantine it if that crashes or hangs
  PLUGGABLE_PROBE_TIMEOUT=60         seconds a probe may take

Loading a plugin calls SE_InitPlugin (if exported), validates what it filled,
creates its devices, then calls TF_InitKernel (if exported). A record's status
is "loaded", "quarantined" (a loading step failed; ``reason`` says which) or
"skipped" (not opened: skip list or security policy; ``reason`` says why).
A bad plugin never makes ``import pluggable`` fail; the others keep working.
"""
