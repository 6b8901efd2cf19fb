"""Cluster state the decision reads: namespaces (labels), NetworkAttachmentDefinitions'
resource names and Trainer runtimes, from a file (`state`) or a list+watch of the API server
(`api`), listed once before the workers fork."""
