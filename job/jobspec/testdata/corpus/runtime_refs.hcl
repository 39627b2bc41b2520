# Runtime values as Nomad evaluates them: a reference to something only
# known on the client is kept as "${...}" text, even bare or in a function.
job "runtime" {
  constraint {
    attribute = attr.kernel.name
    value     = "linux"
  }

  group "g" {
    task "t" {
      driver = "raw_exec"

      env {
        NODE  = "${node.unique.name}"
        UPPER = upper(attr.kernel.name)
        ALLOC = "${NOMAD_ALLOC_ID}-${NOMAD_ALLOC_INDEX}"
        RACK  = meta.rack
        HOME  = "${env["HOME"]}"
        LIT   = "$${NOT_INTERPOLATED}"
      }

      config {
        command = "/bin/echo"
        args    = ["${NOMAD_TASK_DIR}/data", "${attr.unique.hostname}"]
      }
    }
  }
}
