"""Cluster state the decision reads: namespaces (labels), NetworkAttachmentDefinitions'
resource names and Trainer runtimes, from a file (`state`) or a list+watch of the API server
(`api`), listed once before the workers fork; and, in the policy mode, the installed
ValidatingAdmissionPolicies compared with the policies in force (`admission_policies`, read-only)."""
