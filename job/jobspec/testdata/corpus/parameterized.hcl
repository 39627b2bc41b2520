# Dispatched with: berth job dispatch -meta input=... -meta priority=... transcode payload.json
job "transcode" {
  type = "batch"

  meta {
    priority = "normal"
  }

  parameterized {
    payload       = "required"
    meta_required = ["input"]
    meta_optional = ["priority"]
  }

  group "work" {
    task "transcode" {
      driver = "raw_exec"

      dispatch_payload {
        file = "job.json"
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "cat ${NOMAD_TASK_DIR}/job.json; echo ${NOMAD_META_input} ${NOMAD_META_priority}"]
      }
    }
  }
}
