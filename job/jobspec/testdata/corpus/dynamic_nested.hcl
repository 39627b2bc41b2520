# Nested dynamic blocks: tasks from a list, each with its artifacts; the
# inner content reads both iterators.
locals {
  tools = [
    { name = "fetcher", urls = ["https://example.com/a.tgz", "https://example.com/b.tgz"] },
    { name = "indexer", urls = ["https://example.com/c.tgz"] },
  ]
}

job "tools" {
  datacenters = ["dc1"]
  type        = "batch"

  group "tools" {
    dynamic "task" {
      for_each = local.tools
      iterator = tool
      labels   = [tool.value.name]

      content {
        driver = "raw_exec"

        config {
          command = "/bin/echo"
          args    = [tool.value.name]
        }

        dynamic "artifact" {
          for_each = tool.value.urls
          content {
            source      = artifact.value
            destination = "local/${tool.value.name}-${artifact.key}"
          }
        }
      }
    }
  }
}
