job "nodriver" {
  group "g" {
    task "t" {
      config {
        command = "/bin/true"
      }
    }
  }
}
