"""Policy files to a `PolicySet`: the schema, one document compiled (`compiler`), v1alpha1
migration, loading a folder all or nothing, lint for the policy's author, and the store that
reloads a mounted folder."""
