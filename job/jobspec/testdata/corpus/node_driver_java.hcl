job "driver-java" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "java"
      config {
        jar_path = "local/app.jar"
      }
    }
  }
}
