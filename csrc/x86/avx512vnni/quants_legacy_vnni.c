/* The AVX-512 VNNI tier's per-thread buffer, which the sixteen-row kernels (x16_common.h's x16_panel) hold
 * their prepared activations and a tile of file rows in. It grows to the largest request the thread has made
 * and is freed when the thread ends. (The 32-value types' kernels of this tier are sixteen rows a register:
 * Q4_0 and Q8_0 in quants_x16_vnni.c, Q4_1, Q5_0 and Q5_1 in quants_x16b_vnni.c.) */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

/* this thread's buffer, at least `bytes` long and 64-byte aligned (NULL if out of memory) */
static pthread_key_t g_panel_key;
static pthread_once_t g_panel_once = PTHREAD_ONCE_INIT;
typedef struct {
    void *p;
    size_t bytes;
} panel_buf;
static void panel_free(void *v) {
    panel_buf *b = (panel_buf *)v;
    free(b->p);
    free(b);
}
static void panel_key_init(void) { (void)pthread_key_create(&g_panel_key, panel_free); }

static void *panel_memory(size_t bytes) {
    (void)pthread_once(&g_panel_once, panel_key_init);
    panel_buf *b = (panel_buf *)pthread_getspecific(g_panel_key);
    if (!b) {
        if (!(b = (panel_buf *)calloc(1, sizeof(*b)))) return NULL;
        if (pthread_setspecific(g_panel_key, b)) {
            free(b);
            return NULL;
        }
    }
    if (b->bytes < bytes) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes)) return NULL;
        free(b->p);
        b->p = p, b->bytes = bytes;
    }
    return b->p;
}

void *oxl_vnni_panel_memory(size_t bytes);   /* x16_common.h */
void *oxl_vnni_panel_memory(size_t bytes) { return panel_memory(bytes); }
