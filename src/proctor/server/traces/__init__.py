"""The traces service stub: answers 403 `service_not_enabled` so clients use samples."""
