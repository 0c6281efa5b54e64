//go:build !unix

package pki

import "io/fs"

// Outside Unix there is no O_NOFOLLOW; readPrivate still refuses a key whose Lstat shows a link
// and checks that the file it opened is the file it examined.
const openNoFollow = 0

// fileOwner reports no owner outside Unix (Windows ownership lives in ACLs), so the owner checks
// are skipped there. The appliance itself runs only on Linux.
func fileOwner(fs.FileInfo) (uid int, ok bool) { return 0, false }
