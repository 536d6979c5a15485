// run_tool: runs a command line through the shell and returns its exit status and what it
// wrote to stdout, for the tests that run mtc's tools (mtc-plan, mtc-replay) as binaries.
// The caller redirects stderr in the command line ("2>&1", or "2>&1 1>/dev/null" for
// stderr alone).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace mtc {

struct ToolRun {
  int status = -1;     // the exit status; -1 when the command did not exit normally
  std::string output;  // its stdout
};

inline ToolRun run_tool(const std::string& command_line) {
  ToolRun r;
  FILE* pipe = popen(command_line.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, got);
  const int st = pclose(pipe);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace mtc
