// SPDX-License-Identifier: Apache-2.0
#pragma once
// Whether a file that steers rdmagw (the services file, which says where
// every Service connection goes and whether it is tunnelled) can only have
// been written by root or by rdmagw's own user. The key files have their
// own rule (config/key_files.h: private to the owner); this one is for
// files anyone may read but only those two may write.
#include <sys/stat.h>

#include <string>

namespace rdmagw {

// Empty if `path` is trusted: every directory on the way to it, as written
// and once symlinks are resolved, is owned by root or this process's user
// and writable by no one else (a sticky directory, as /tmp, may be: there
// only owners replace their entries); every symlink on the way is owned by
// root or this user. Otherwise why not, naming the offending path and the
// fix. Nothing is opened: check trusted_file_problem() on what is read.
std::string trusted_path_problem(const std::string& path);

// Empty if the file (`st`, from the open descriptor) is owned by root or
// this process's user and writable by neither its group nor others.
std::string trusted_file_problem(const std::string& path, const struct stat& st);

}  // namespace rdmagw
