"""What differs per fabric: each transport's fallback signatures (`transports`, data) and the
network mechanisms that attach a pod to the fabric (`multus`). A new transport is a table here."""
