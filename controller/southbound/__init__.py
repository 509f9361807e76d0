"""The southbound: the desired overlay and its diff (pure), the OpenFlow codec,
switch sessions, the reconciler thread and the os-ken app. Only this package
touches switches.
"""
