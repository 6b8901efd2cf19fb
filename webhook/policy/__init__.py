"""Policy files to a `PolicySet`: the schema, one document compiled (`compiler`), v1alpha1
migration, loading a folder all or nothing, lint for the policy's author, the store that
reloads a mounted folder, and the pods' final-state check generated from the policies as
ValidatingAdmissionPolicies (`admission_policy`)."""
