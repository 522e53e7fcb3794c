#include "transport/bootstrap/bootstrap.h"

#include <stdlib.h>

void zc_bootstrap_destroy(zc_bootstrap_t *bs)
{
    if (!bs)
        return;
    if (bs->ops && bs->ops->destroy)
        bs->ops->destroy(bs->ctx);
    free(bs);
}
