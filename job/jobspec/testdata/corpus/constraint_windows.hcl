# Valid everywhere; runs only on Windows nodes.
job "windows-only" {
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "windows"
  }

  group "g" {
    task "t" {
      driver = "raw_exec"

      config {
        command = "C:\\Windows\\System32\\whoami.exe"
      }
    }
  }
}
