{
  "targets": [
    {
      "target_name": "scrub_scan",
      "sources": ["scan.c"],
      "cflags": ["-O2", "-std=c11", "-Wall", "-Wextra"]
    }
  ]
}
