// The bytes of dlaunch-keepalive (runtime/keepalive.c), built into the agent
// (cmake/EmbedFile.cmake): a node where the agent was copied alone
// (docs/portable-agent.md) has no dlaunch-keepalive beside it, and the agent
// writes this copy into the job's private folder instead.
#pragma once

extern "C" {
extern const unsigned char dlaunch_keepalive_image[];
extern const unsigned long dlaunch_keepalive_image_size;
}
