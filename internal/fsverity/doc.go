// Package fsverity is the kernel's fs-verity as LayerFS uses it: a file
// sealed with FS_IOC_ENABLE_VERITY becomes read-only for good, and every
// page read from it is checked against a Merkle tree of SHA-256 hashes
// built when it was sealed, so a damaged page reads as EIO, never as
// wrong bytes (Documentation/filesystems/fsverity.rst). The file's
// digest (FS_IOC_MEASURE_VERITY, or Digest from its bytes alone) names
// its content; overlayfs's verity= option checks a data-only lower file
// against the digest its metacopy xattr records (Metacopy), as composefs
// does (Documentation/filesystems/overlayfs.rst, "fs-verity support").
//
// Everything here uses SHA-256, 4096-byte Merkle tree blocks and no salt:
// the parameters of fsverity-utils' `fsverity digest` and composefs.
// Supported probes a directory's file system: ext4 with the verity
// feature, f2fs, btrfs and XFS on recent kernels, on a kernel built with
// CONFIG_FS_VERITY.
package fsverity
