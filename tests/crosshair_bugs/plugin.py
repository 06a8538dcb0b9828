"""CrossHair plugin: ``crosshair check --extra_plugin tests/crosshair_bugs/plugin.py ...``.

CrossHair executes this file's text; it registers the small-scope factories of
``small_scope``.  Run CrossHair from the repository root so ``tests`` imports.
"""

from tests.crosshair_bugs.small_scope import register

register()
