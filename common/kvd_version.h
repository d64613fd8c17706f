/* kvd_version.h — the kvdrift version: printed by --version, recorded in golden entries (a
 * golden blessed by another version must be blessed again) and in reports. */
#ifndef KVD_VERSION_H
#define KVD_VERSION_H

#define KVD_VERSION "0.1.0"

#endif
